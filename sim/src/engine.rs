//! The simulator's engine: a virtual clock that jumps from one instant
//! where something happens (a submit, an end, an event) to the next, and
//! runs one real scheduling pass at each.
//!
//! Within an instant things happen in this order, which is also the order
//! of the output lines: jobs reaching their end, submits (in file order),
//! events (in file order), then the pass's starts and the pending jobs
//! whose reason changed (in queue order).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use berth_scheduler::assoc::UserRecord;
use berth_scheduler::catalog::Catalog;
use berth_scheduler::deps::{self, DependencySpec};
use berth_scheduler::evict::requeued_detail;
use berth_scheduler::fit::fits;
use berth_scheduler::limits::{self, SubmitCounts};
use berth_scheduler::model::{Host, HostState, JobId, JobState, Resources};
use berth_scheduler::pass::{
    schedule_in, ArrayTask, PendingJob, Plan, Policy, RunningJob, Snapshot,
};
use berth_scheduler::preempt::{exempt_s, PreemptCounters};
use berth_scheduler::qos::Qos;
use berth_scheduler::reason::Reason;
use berth_scheduler::resv;
use berth_scheduler::usage::{RunCharge, Usage};
use berth_scheduler::HostLayout;

use berth_state::ROOM_FREED_HOLD_MS;

use crate::multipath_log;
use crate::SimError;

/// One submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimJob {
    /// The scenario's name for it, echoed in the output.
    pub name: String,
    /// Slurm's job name (`sbatch -J`), which `singleton` matches with the
    /// user; an array's tasks share their array's.
    pub job_name: String,
    pub submit_s: u64,
    /// The job as the pass sees it; the engine fills in its id, `held`,
    /// `submit_ms` and `dependency`.
    pub spec: PendingJob,
    /// How long it really runs; `None` = until its time limit.
    pub runtime_s: Option<u64>,
    /// Non-zero ends it FAILED.
    pub exit_code: i32,
    pub hold: bool,
    /// Refused at submit, with this error.
    pub rejected: Option<String>,
    /// Its dependencies; the job ids in it are indices into the jobs.
    pub dependency: Option<DependencySpec>,
    /// For a task of an array: the index of the array's first task, whose
    /// job id is the array's id, and the array's `%max` (0 = none).
    pub array_of: Option<(usize, u32)>,
    /// Seconds it takes to exit once sent the stop signal when evicted,
    /// bounded by the stop grace.
    pub stop_takes_s: u64,
}

/// Something that happens at a time. Job lists are indices into the jobs
/// (several for an array).
#[derive(Debug, Clone, PartialEq)]
pub enum SimAction {
    Cancel(Vec<usize>),
    /// Releases a held job (Slurm's `scontrol release`).
    Release(Vec<usize>),
    Hold(Vec<usize>),
    /// The hosts go down: their running jobs end NODE_FAIL.
    HostDown(Vec<String>),
    HostUp(Vec<String>),
    /// The QOS of that name becomes this one.
    ModifyQos(Box<Qos>),
    SetAccountPriority(String, i64),
    SetUserPriority(String, i64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimEvent {
    pub at_s: u64,
    pub action: SimAction,
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct SimInput {
    pub hosts: Vec<Host>,
    pub jobs: Vec<SimJob>,
    pub events: Vec<SimEvent>,
    pub policy: Policy,
    /// Partitions, QOS, accounts, users and starting usage: the snapshot's
    /// policy objects (its hosts, pending and running are the engine's).
    pub world: Snapshot,
    pub until_s: Option<u64>,
    /// Write the event lines (scenarios) or only count (trace replay).
    pub emit_events: bool,
    /// Stop signal to kill (the agent's `stop_grace_s`).
    pub stop_grace_s: u64,
}

/// Figures over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimStats {
    /// Submitted and not rejected.
    pub jobs: usize,
    pub completed: usize,
    /// Over jobs that started.
    pub mean_wait_s: f64,
    pub p95_wait_s: u64,
    /// Over jobs that ended: max((wait + run) / max(run, 10), 1).
    pub mean_bsld: f64,
    /// CPU-seconds held by jobs that ended, over the cluster's CPUs times
    /// the makespan.
    pub utilization: f64,
    /// Last end minus first submit.
    pub makespan_s: u64,
    pub passes: u64,
    /// The passes' preemption counters, added up.
    pub preemption: PreemptCounters,
    /// Victims that went back to the queue, and those ended for good.
    pub preempted_requeued: u64,
    pub preempted_cancelled: u64,
    /// Starts on capacity lent by idle-fill.
    pub borrowed_starts: usize,
    /// Runs stopped and requeued by idle-fill's reclaim.
    pub reclaims: usize,
    /// Emulator unit-seconds held by jobs that ended, over the cluster's
    /// units times the makespan (0 without emulators).
    pub emu_utilization: f64,
}

/// What a run produced: JSON lines (empty unless `emit_events`), stats,
/// a down-sampled timeline, and the usage charged, decayed to the last
/// instant.
#[derive(Debug, Clone)]
pub struct SimOutput {
    pub lines: String,
    pub stats: SimStats,
    pub timeline: Vec<TimelinePoint>,
    pub usage: Usage,
}

/// The cluster at one instant: for `--plot`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelinePoint {
    pub t_s: u64,
    /// Allocated CPUs over all hosts' CPUs, after the instant's pass.
    pub utilization: f64,
    /// Jobs pending after the pass.
    pub pending_jobs: usize,
}

/// Most timeline points kept: when full, every other point is dropped and
/// the sampling stride doubles, so a run of any length keeps an even
/// spread of at most this many.
pub const TIMELINE_POINTS_MAX: usize = 2_048;

/// How far a run has got, handed to the caller's observer after each
/// instant (the crate has no clock; the caller decides when to draw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub t_s: u64,
    /// Submits handled so far, of `jobs_total`.
    pub jobs_submitted: usize,
    pub jobs_total: usize,
}

/// Bounded timeline: a point at most every `stride_s` of virtual time.
struct Timeline {
    points: Vec<TimelinePoint>,
    stride_s: u64,
    next_s: u64,
}

impl Timeline {
    fn wants(&self, t_s: u64) -> bool {
        t_s >= self.next_s
    }

    fn push(&mut self, point: TimelinePoint) {
        if self.points.len() == TIMELINE_POINTS_MAX {
            let mut keep = false;
            self.points.retain(|_| {
                keep = !keep;
                keep
            });
            self.stride_s = self.stride_s.saturating_mul(2).max(1);
        }
        self.next_s = point.t_s.saturating_add(self.stride_s);
        self.points.push(point);
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Status {
    NotSubmitted,
    Pending,
    Running {
        hosts: Vec<usize>,
        per_host: Resources,
    },
    Done,
}

struct JobRun {
    /// 0 until submitted (ids start at 1).
    id: JobId,
    status: Status,
    held: bool,
    start_s: Option<u64>,
    end: Option<(u64, JobState)>,
    /// CPUs it holds across its hosts (whole hosts when exclusive).
    held_cpus: u64,
    last_reason: Option<Reason>,
    /// The partition it started in.
    partition: String,
    /// Emulator units it holds across its hosts.
    held_emu: u64,
    array: Option<ArrayTask>,
    /// The allocation of its current run (a new one each start).
    alloc_id: u64,
    /// Set while it is being stopped by an eviction.
    evicted: Option<evict::Evicted>,
    /// Seconds it spent pending before its current run (or so far), and
    /// since when it is pending now.
    waited_s: u64,
    pending_since_s: u64,
    /// CPU-seconds of earlier runs cut short by an eviction.
    busy_cpu_s_before: u128,
    /// The job it was evicted for, until its first reason line (or start)
    /// after going back to the queue.
    preempted_by: Option<String>,
    /// Its current run is on capacity lent by idle-fill.
    borrowed: bool,
    /// Its current run's usage is charged when it ends rather than as it
    /// runs: an opportunistic run a reclaim stops is charged nothing.
    charge_at_end: bool,
    /// How many times idle-fill reclaimed it.
    reclaims: u32,
    borrowed_starts: u32,
}

#[derive(Serialize)]
struct SubmitLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    job_id: JobId,
}

#[derive(Serialize)]
struct RejectedLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    error: &'a str,
}

#[derive(Serialize)]
struct PendingLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

#[derive(Serialize)]
struct PriorityLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct StartLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    hosts: Vec<&'a str>,
    borrowed: bool,
}

#[derive(Serialize)]
struct EndLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    state: &'static str,
    /// Evicted jobs only: back to the queue or not, why, and for whom.
    #[serde(skip_serializing_if = "Option::is_none")]
    requeue: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'a str>,
}

/// Rounds a figure to 6 decimals so the output does not carry float noise.
pub(crate) fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

struct Engine<'a> {
    input: &'a SimInput,
    /// The pass's view, kept up to date between instants rather than
    /// rebuilt for each pass: hosts with what is allocated on them, pending
    /// jobs in id order (`pending_idx` holds their job indices), running
    /// jobs in job-index order (`running_idx`), and the partitions, QOS,
    /// accounts, users and usage as they are now. `held` and `dependency`
    /// of pending jobs are refreshed before each pass.
    world: Snapshot,
    pending_idx: Vec<usize>,
    running_idx: Vec<usize>,
    /// Time usage was last accrued and decayed.
    usage_at_s: u64,
    host_index: HashMap<String, usize>,
    runs: Vec<JobRun>,
    /// (job id, job index), in queue order.
    pending: BTreeSet<(JobId, usize)>,
    running: BTreeSet<usize>,
    /// (end time, job id, job index).
    ends: BinaryHeap<Reverse<(u64, JobId, usize)>>,
    lines: String,
    next_job_id: JobId,
    next_alloc_id: u64,
    preemption: PreemptCounters,
    preempted_requeued: u64,
    preempted_cancelled: u64,
    /// Jobs whose victims exited, and when: the room is theirs first for
    /// the state machine's `ROOM_FREED_HOLD_MS`, or until they start.
    claims: BTreeMap<usize, u64>,
    /// Instants where a running job's preemption exempt time runs out.
    exempt_ends: BinaryHeap<Reverse<u64>>,
    /// Multi-path reservations held after the last pass.
    multipath: multipath_log::Held,
    /// Why an array's submit was refused, by its first task's index: the
    /// submit limits judge the array whole (each task a job, as Slurm
    /// counts them), so its later tasks are refused the same way.
    array_refusals: HashMap<usize, String>,
    /// `world`'s hosts laid out for the pass, kept while no host goes
    /// down or up (nothing else changes their states or attributes).
    layout: Option<HostLayout>,
}

mod evict;

impl Engine<'_> {
    fn line<T: Serialize>(&mut self, line: &T) -> Result<(), SimError> {
        if self.input.emit_events {
            let text =
                serde_json::to_string(line).map_err(|e| SimError::Internal(e.to_string()))?;
            self.lines.push_str(&text);
            self.lines.push('\n');
        }
        Ok(())
    }

    fn submit(&mut self, idx: usize, t_s: u64) -> Result<(), SimError> {
        let job = &self.input.jobs[idx];
        if let Some(error) = &job.rejected {
            self.runs[idx].status = Status::Done;
            return self.line(&RejectedLine {
                t_s,
                event: "rejected",
                job: &job.name,
                error,
            });
        }
        let array_first = job.array_of.map(|(first, _)| first);
        let refused_with_array = array_first
            .filter(|&first| first != idx)
            .and_then(|first| self.array_refusals.get(&first).cloned());
        if let Some(error) = refused_with_array {
            self.runs[idx].status = Status::Done;
            return self.line(&RejectedLine {
                t_s,
                event: "rejected",
                job: &job.name,
                error: &error,
            });
        }
        // A later task was counted with its array's first.
        let counted_already = array_first.is_some_and(|first| first != idx);
        if !self.world.accounts.is_empty() && !counted_already {
            self.refresh_pending();
            let catalog = Catalog::new(&self.world);
            let counts = SubmitCounts::new(&self.world, &catalog);
            let new_jobs = match array_first {
                Some(first) => self
                    .input
                    .jobs
                    .iter()
                    .filter(|j| j.array_of.map(|(f, _)| f) == Some(first))
                    .count() as u64,
                None => 1,
            };
            if let Err(refusal) = limits::check_submit_jobs(&job.spec, &catalog, &counts, new_jobs)
            {
                self.runs[idx].status = Status::Done;
                let error = refusal.to_string();
                if let Some(first) = array_first {
                    self.array_refusals.insert(first, error.clone());
                }
                return self.line(&RejectedLine {
                    t_s,
                    event: "rejected",
                    job: &job.name,
                    error: &error,
                });
            }
        }
        if let Err(refusal) = self.reservation_check(idx, t_s) {
            self.runs[idx].status = Status::Done;
            let error = refusal.to_string();
            return self.line(&RejectedLine {
                t_s,
                event: "rejected",
                job: &job.name,
                error: &error,
            });
        }
        let id = self.next_job_id;
        self.next_job_id += 1;
        let array = job.array_of.map(|(first, max_running)| ArrayTask {
            array_id: if first == idx {
                id
            } else {
                self.runs[first].id
            },
            max_running,
        });
        let run = &mut self.runs[idx];
        run.id = id;
        run.array = array;
        run.status = Status::Pending;
        run.pending_since_s = t_s;
        run.held = job.hold;
        self.pending.insert((id, idx));
        // Ids only grow, so the view stays in id order.
        debug_assert!(self.world.pending.last().is_none_or(|p| p.id < id));
        self.world.pending.push(Arc::new(PendingJob {
            id,
            held: job.hold,
            submit_ms: job.submit_s.saturating_mul(1000),
            dependency: None,
            array,
            ..job.spec.clone()
        }));
        self.pending_idx.push(idx);
        self.line(&SubmitLine {
            t_s,
            event: "submit",
            job: &job.name,
            job_id: id,
        })
    }

    fn finish(&mut self, idx: usize, t_s: u64, state: JobState) -> Result<(), SimError> {
        if self.runs[idx].charge_at_end {
            self.charge_run(idx, t_s);
        }
        if !self.leave(idx) {
            return Ok(());
        }
        self.runs[idx].end = Some((t_s, state));
        let name = &self.input.jobs[idx].name;
        self.line(&EndLine {
            t_s,
            event: "end",
            job: name,
            state: state.slurm_name(),
            requeue: None,
            cause: None,
            by: None,
        })
    }

    /// Takes job `idx` off its hosts, or out of the queue; false when it is
    /// neither running nor pending.
    fn leave(&mut self, idx: usize) -> bool {
        let run = &mut self.runs[idx];
        match std::mem::replace(&mut run.status, Status::Done) {
            Status::Running { hosts, per_host } => {
                for h in hosts {
                    let host = &mut self.world.hosts[h];
                    host.allocated = host.allocated.saturating_sub(per_host);
                }
                self.running.remove(&idx);
                if let Ok(at) = self.running_idx.binary_search(&idx) {
                    self.running_idx.remove(at);
                    self.world.running.remove(at);
                }
            }
            Status::Pending => {
                let id = run.id;
                self.pending.remove(&(id, idx));
                self.remove_pending_view(id);
            }
            other => {
                // Not submitted yet or already over: nothing to end.
                run.status = other;
                return false;
            }
        }
        true
    }

    /// How the job ends if nothing stops it: when, and in what state.
    fn natural_end(job: &SimJob, start_s: u64) -> Option<(u64, JobState)> {
        let own_end = |code: i32| {
            if code == 0 {
                JobState::Completed
            } else {
                JobState::Failed
            }
        };
        let limit_s = (job.spec.time_limit_s > 0).then_some(job.spec.time_limit_s);
        match (job.runtime_s, limit_s) {
            (Some(run), Some(limit)) if run > limit => Some((start_s + limit, JobState::Timeout)),
            (Some(run), _) => Some((start_s + run, own_end(job.exit_code))),
            (None, Some(limit)) => Some((start_s + limit, own_end(job.exit_code))),
            (None, None) => None,
        }
    }

    /// Takes job `id` out of the pending view.
    fn remove_pending_view(&mut self, id: JobId) {
        if let Ok(at) = self.world.pending.binary_search_by_key(&id, |p| p.id) {
            self.world.pending.remove(at);
            self.pending_idx.remove(at);
        }
    }

    /// Brings `held` and `dependency` of the pending view up to date (holds,
    /// releases and other jobs' ends change them between passes).
    fn refresh_pending(&mut self) {
        debug_assert_eq!(self.world.pending.len(), self.pending_idx.len());
        let room_freed = self.room_freed_for();
        for at in 0..self.pending_idx.len() {
            let idx = self.pending_idx[at];
            let dependency = self.input.jobs[idx]
                .dependency
                .as_ref()
                .and_then(|d| self.dependency_reason(idx, d));
            // The pass holds no view after it: this copies nothing.
            let view = Arc::make_mut(&mut self.world.pending[at]);
            view.held = self.runs[idx].held;
            view.dependency = dependency;
            view.room_freed = room_freed.contains(&idx);
        }
    }

    /// The running view of job `idx`, which has just started.
    fn running_view(&self, idx: usize) -> Option<RunningJob> {
        let run = &self.runs[idx];
        let Status::Running { hosts, per_host } = &run.status else {
            return None;
        };
        let spec = &self.input.jobs[idx].spec;
        let start_s = run.start_s.unwrap_or(0);
        Some(RunningJob {
            id: run.id,
            hosts: hosts
                .iter()
                .map(|&h| self.world.hosts[h].name.clone())
                .collect(),
            per_host: *per_host,
            end_ms: (spec.time_limit_s > 0)
                .then(|| (start_s + spec.time_limit_s).saturating_mul(1000)),
            start_ms: start_s.saturating_mul(1000),
            user: spec.user.clone(),
            account: spec.account.clone(),
            qos: spec.qos.clone(),
            partition: run.partition.clone(),
            array: run.array,
            submit_ms: self.input.jobs[idx].submit_s.saturating_mul(1000),
            nice: spec.nice,
            preemptible: spec.preemptible,
            alloc_id: run.alloc_id,
            evicted_for: run.evicted.as_ref().map(|e| self.runs[e.by].id),
            borrowed: run.borrowed,
            reclaims: run.reclaims,
        })
    }

    /// One instant's pass. When it evicts jobs that exit at once (no grace,
    /// no stop time), the pass runs again at the same instant so the room
    /// they leave goes to the job they were evicted for; only the last
    /// round's reasons are written.
    fn pass(&mut self, t_s: u64) -> Result<(), SimError> {
        for round in 0..=evict::ROUNDS_PER_INSTANT_MAX {
            let last = round == evict::ROUNDS_PER_INSTANT_MAX;
            if !self.pass_round(t_s, last)? {
                break;
            }
        }
        Ok(())
    }

    /// One round of [`Engine::pass`]; true when it should run again.
    fn pass_round(&mut self, t_s: u64, last: bool) -> Result<bool, SimError> {
        let now_ms = t_s.saturating_mul(1000);
        self.refresh_pending();
        let layout = self
            .layout
            .get_or_insert_with(|| HostLayout::new(&self.world));
        let plan = schedule_in(&self.world, layout, &self.input.policy, now_ms);
        // Starts are applied, and reported, in queue order, whether single
        // hosts or gangs.
        let mut placed: BTreeMap<JobId, (Vec<&str>, Resources, &str, usize)> = BTreeMap::new();
        for p in &plan.starts {
            placed.insert(
                p.job_id,
                (
                    vec![p.host.as_str()],
                    p.resources,
                    p.partition.as_str(),
                    p.path,
                ),
            );
        }
        for g in &plan.gang_starts {
            placed.insert(
                g.job_id,
                (
                    g.hosts.iter().map(String::as_str).collect(),
                    g.resources,
                    g.partition.as_str(),
                    g.path,
                ),
            );
        }
        // The queue before the starts, for the reason lines; a trace replay
        // writes none, so it does not copy its (long) queue every pass.
        let queue: Vec<(JobId, usize)> = if self.input.emit_events {
            self.pending.iter().copied().collect()
        } else {
            Vec::new()
        };
        // `placed` is in id order, which is the queue's order.
        for (id, (names, per_host, partition, path)) in placed {
            let Ok(at) = self.world.pending.binary_search_by_key(&id, |p| p.id) else {
                return Err(SimError::Internal(format!(
                    "plan starts job {id} that is not pending"
                )));
            };
            let idx = self.pending_idx[at];
            let job = &self.input.jobs[idx];
            let mut hosts = Vec::new();
            for name in names {
                let h = *self
                    .host_index
                    .get(name)
                    .ok_or_else(|| SimError::Internal(format!("plan names unknown host {name}")))?;
                if fits(&self.world.hosts[h], per_host).is_err() {
                    return Err(SimError::Internal(format!(
                        "plan puts job {} on {name}, which lacks room",
                        job.name
                    )));
                }
                let host = &mut self.world.hosts[h];
                host.allocated = host.allocated.saturating_add(per_host);
                hosts.push(h);
            }
            let borrowed = plan.borrowed.contains(&id);
            let opportunistic = borrowed || self.idle_fill_preemptable(idx);
            let idle_fill = &self.input.policy.idle_fill;
            let run = &mut self.runs[idx];
            self.pending.remove(&(run.id, idx));
            self.running.insert(idx);
            let id = run.id;
            run.status = Status::Running {
                hosts: hosts.clone(),
                per_host,
            };
            run.borrowed = borrowed;
            run.borrowed_starts += u32::from(borrowed);
            run.charge_at_end = idle_fill.enabled && opportunistic;
            let window_s = idle_fill.exempt_window_s(run.reclaims);
            // Reclaim may take it when its idle-fill exempt window is over:
            // that instant gets a pass (a window of 0 is over now).
            if run.charge_at_end && window_s > 0 {
                self.exempt_ends.push(Reverse(t_s.saturating_add(window_s)));
            }
            run.start_s = Some(t_s);
            run.waited_s += t_s.saturating_sub(run.pending_since_s);
            run.preempted_by = None;
            run.alloc_id = self.next_alloc_id;
            self.next_alloc_id += 1;
            run.partition = partition.to_string();
            run.held_cpus = u64::from(per_host.cpus) * hosts.len() as u64;
            run.held_emu = u64::from(per_host.emu) * hosts.len() as u64;
            run.last_reason = None;
            if let Some((end_s, _)) = Self::natural_end(job, t_s) {
                self.ends.push(Reverse((end_s, run.id, idx)));
            }
            self.remove_pending_view(id);
            self.claims.remove(&idx);
            let view = self
                .running_view(idx)
                .ok_or_else(|| SimError::Internal(format!("job {} did not start", job.name)))?;
            let at = self.running_idx.partition_point(|&i| i < idx);
            if self.input.policy.preemption.enabled {
                // A blocked job may evict it once its exempt time is over:
                // that instant gets a pass.
                let catalog = Catalog::new(&self.world);
                let exempt_s = exempt_s(&view, &catalog, &self.input.policy.preemption);
                if exempt_s > 0 {
                    self.exempt_ends.push(Reverse(t_s.saturating_add(exempt_s)));
                }
            }
            self.running_idx.insert(at, idx);
            self.world.running.insert(at, view);
            if let Some(held) = self.multipath.held.remove(&id) {
                let line = multipath_log::dispatch_line(t_s, &job.name, path, &held);
                self.line(&line)?;
            }
            let names = hosts
                .iter()
                .map(|&h| self.world.hosts[h].name.as_str())
                .collect();
            let line = StartLine {
                t_s,
                event: "start",
                job: &job.name,
                hosts: names,
                borrowed,
            };
            if self.input.emit_events {
                let text =
                    serde_json::to_string(&line).map_err(|e| SimError::Internal(e.to_string()))?;
                self.lines.push_str(&text);
                self.lines.push('\n');
            }
        }
        self.preemption.add(&plan.preemption);
        if self.apply_evictions(&plan.evictions, t_s)? && !last {
            return Ok(true);
        }
        for (id, idx) in queue {
            if !self.pending.contains(&(id, idx)) {
                continue;
            }
            let Some(reason) = plan.reasons.get(&id) else {
                continue;
            };
            if self.runs[idx].last_reason.as_ref() == Some(reason) {
                continue;
            }
            self.runs[idx].last_reason = Some(*reason);
            // A job back in the queue after an eviction says so once.
            let pass_detail = plan.details.get(&id).map(String::as_str);
            let detail = match self.runs[idx].preempted_by.take() {
                Some(by) => Some(requeued_detail(&by, pass_detail)),
                None => pass_detail.map(str::to_string),
            };
            let name = &self.input.jobs[idx].name;
            self.line(&PendingLine {
                t_s,
                event: "pending",
                job: name,
                reason: reason.code(),
                detail: detail.as_deref(),
            })?;
        }
        self.note_multipath(&plan, t_s)?;
        Ok(false)
    }

    /// Keeps the multi-path reservations the pass made (for the next
    /// dispatch line and `max_reserve_time_s`) and writes a `reserve` line
    /// for each pending job whose held alternatives changed.
    fn note_multipath(&mut self, plan: &Plan, t_s: u64) -> Result<(), SimError> {
        let now_ms = t_s.saturating_mul(1000);
        let changes = self.multipath.update(&plan.multipath);
        for change in changes {
            let Ok(at) = self
                .world
                .pending
                .binary_search_by_key(&change.job_id, |p| p.id)
            else {
                continue; // started or ended meanwhile
            };
            if !change.paths.is_empty() {
                Arc::make_mut(&mut self.world.pending[at])
                    .multipath_since_ms
                    .get_or_insert(now_ms);
            }
            let name = &self.input.jobs[self.pending_idx[at]].name;
            let line = multipath_log::reserve_line(t_s, name, &change);
            let text =
                serde_json::to_string(&line).map_err(|e| SimError::Internal(e.to_string()))?;
            if self.input.emit_events {
                self.lines.push_str(&text);
                self.lines.push('\n');
            }
        }
        Ok(())
    }

    /// The `--reservation` submit check against the scenario's windows.
    fn reservation_check(&self, idx: usize, t_s: u64) -> Result<(), resv::ReservationRefusal> {
        let spec = &self.input.jobs[idx].spec;
        if spec.reservation.is_empty() {
            return Ok(());
        }
        let catalog = Catalog::new(&self.world);
        let account = catalog
            .account_of(&spec.user, &spec.account)
            .map_or("", |a| a.name.as_str());
        resv::check_submit(
            spec,
            account,
            &self.world.reservations,
            t_s.saturating_mul(1000),
        )
    }

    /// Whether job `idx`'s QOS is `idle_fill_preemptable` (with idle-fill
    /// on, its runs are opportunistic: reclaimable even within quota).
    fn idle_fill_preemptable(&self, idx: usize) -> bool {
        if !self.input.policy.idle_fill.enabled {
            return false;
        }
        let spec = &self.input.jobs[idx].spec;
        let catalog = Catalog::new(&self.world);
        let account = catalog.account_of(&spec.user, &spec.account);
        catalog
            .qos(catalog.qos_name_of(&spec.qos, account))
            .is_some_and(|q| q.idle_fill_preemptable)
    }

    /// Charges job `idx`'s current run, from its start to `t_s`, to usage
    /// at once (opportunistic runs are charged when they end, unless a
    /// reclaim ends them).
    fn charge_run(&mut self, idx: usize, t_s: u64) {
        let Status::Running { hosts, per_host } = &self.runs[idx].status else {
            return;
        };
        let ran_s = t_s.saturating_sub(self.runs[idx].start_s.unwrap_or(t_s)) as f64;
        let spec = &self.input.jobs[idx].spec;
        let run = RunCharge {
            user: &spec.user,
            account: &spec.account,
            qos: &spec.qos,
            hosts: hosts.len() as u64,
            per_host: *per_host,
        };
        // The catalog reads the policy, not the usage it charges.
        let mut usage = std::mem::take(&mut self.world.usage);
        usage.charge_run(&Catalog::new(&self.world), &run, ran_s);
        self.world.usage = usage;
    }
}

/// How many hosts have at least so many CPUs free: counted by value where
/// free CPUs take few values (a sort cost more than the rest of the check
/// in a trace replay), else sorted.
enum RoomyHosts {
    /// `[c]`: hosts with at least `c` CPUs free.
    AtLeast(Vec<usize>),
    /// Free CPUs, most first.
    Sorted(Vec<u32>),
}

impl RoomyHosts {
    fn new(mut free_cpus: Vec<u32>) -> RoomyHosts {
        let most = free_cpus.iter().copied().max().unwrap_or(0) as usize;
        if most > 2 * free_cpus.len() + 64 {
            free_cpus.sort_unstable_by(|a, b| b.cmp(a));
            return RoomyHosts::Sorted(free_cpus);
        }
        let mut at_least = vec![0usize; most + 2];
        for &c in &free_cpus {
            at_least[c as usize] += 1;
        }
        for c in (0..=most).rev() {
            at_least[c] += at_least[c + 1];
        }
        RoomyHosts::AtLeast(at_least)
    }

    fn with_at_least(&self, cpus: u32) -> usize {
        match self {
            RoomyHosts::AtLeast(at_least) => at_least.get(cpus as usize).copied().unwrap_or(0),
            RoomyHosts::Sorted(free) => free.partition_point(|&c| c >= cpus),
        }
    }
}

impl Engine<'_> {
    /// A necessary condition for any start now: some pending job has, on
    /// one of its paths, enough up hosts whose free CPUs cover its per-host
    /// ask, and its ask is within the most any up host has free (idle
    /// hosts only, for an exclusive job). False means a pass would start
    /// nothing. Costs one count of the hosts by free CPUs and a lookup per
    /// job.
    fn some_job_may_fit(&self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        // One walk over the hosts: this runs at every instant of a replay.
        let up = || self.world.hosts.iter().filter(|h| h.state == HostState::Up);
        let mut free_cpus = Vec::with_capacity(self.world.hosts.len());
        let mut idle = 0usize;
        for h in up() {
            free_cpus.push(h.inventory.cpus.saturating_sub(h.allocated.cpus));
            idle += usize::from(h.allocated.is_zero());
        }
        let roomy_hosts = RoomyHosts::new(free_cpus);
        // The most of each resource any up host has free, walked for only
        // when a job that passes the CPU count asks for more than CPUs (a
        // trace's jobs never do).
        let mut most_free: Option<Resources> = None;
        self.pending.iter().any(|&(_, idx)| {
            self.input.jobs[idx].spec.paths().iter().any(|shape| {
                let wanted = shape.hosts_needed();
                if shape.exclusive {
                    return idle >= wanted;
                }
                let need = shape.per_host;
                if roomy_hosts.with_at_least(need.cpus) < wanted {
                    return false;
                }
                // A host with `need.cpus` free exists (wanted >= 1).
                if (Resources { cpus: 0, ..need }).is_zero() {
                    return true;
                }
                let most = *most_free.get_or_insert_with(|| {
                    up().fold(Resources::default(), |m, h| m.component_max(h.free()))
                });
                need.within(most)
            })
        })
    }

    /// Why the job's dependencies hold it, if they do.
    fn dependency_reason(&self, idx: usize, spec: &DependencySpec) -> Option<Reason> {
        let state_of = |j: JobId| -> Option<JobState> {
            let run = self.runs.get(usize::try_from(j).ok()?)?;
            match (&run.status, run.end) {
                (_, Some((_, state))) => Some(state),
                (Status::Running { .. }, _) => Some(JobState::Running),
                (Status::Pending | Status::NotSubmitted, _) => Some(JobState::Pending),
                (Status::Done, None) => Some(JobState::Cancelled),
            }
        };
        // Singleton, as Slurm and the live cluster read it: another job of
        // the same job name and user is running, or pending ahead of it.
        let job = &self.input.jobs[idx];
        let singleton_blocked = self
            .running
            .iter()
            .chain(self.pending.iter().map(|(_, i)| i).filter(|&&i| i < idx))
            .any(|&i| {
                i != idx
                    && self.input.jobs[i].spec.user == job.spec.user
                    && self.input.jobs[i].job_name == job.job_name
            });
        deps::evaluate(spec, state_of, singleton_blocked).reason()
    }

    /// Applies one scenario event.
    fn act(&mut self, action: &SimAction, t_s: u64) -> Result<(), SimError> {
        match action {
            SimAction::Cancel(jobs) => {
                for &j in jobs {
                    self.finish(j, t_s, JobState::Cancelled)?;
                }
            }
            SimAction::Release(jobs) => {
                for &j in jobs {
                    self.runs[j].held = false;
                }
            }
            SimAction::Hold(jobs) => {
                // Only a pending job can be held, as in Slurm and on the
                // cluster (`scontrol hold` of a running job is refused).
                for &j in jobs {
                    if self.runs[j].status == Status::Pending {
                        self.runs[j].held = true;
                    }
                }
            }
            SimAction::HostDown(names) => {
                let down: Vec<usize> = names
                    .iter()
                    .filter_map(|n| self.host_index.get(n).copied())
                    .collect();
                for &h in &down {
                    self.world.hosts[h].state = HostState::Down;
                }
                self.layout = None;
                let victims: Vec<usize> = self
                    .running
                    .iter()
                    .copied()
                    .filter(|&i| matches!(&self.runs[i].status, Status::Running { hosts, .. } if hosts.iter().any(|h| down.contains(h))))
                    .collect();
                for i in victims {
                    self.finish(i, t_s, JobState::NodeFail)?;
                }
            }
            SimAction::HostUp(names) => {
                for n in names {
                    if let Some(&h) = self.host_index.get(n) {
                        self.world.hosts[h].state = HostState::Up;
                    }
                }
                self.layout = None;
            }
            SimAction::ModifyQos(qos) => {
                match self.world.qos.iter_mut().find(|q| q.name == qos.name) {
                    Some(q) => *q = (**qos).clone(),
                    None => self.world.qos.push((**qos).clone()),
                }
            }
            SimAction::SetAccountPriority(account, priority) => {
                let Some(a) = self.world.accounts.iter_mut().find(|a| a.name == *account) else {
                    return Ok(());
                };
                let old = std::mem::replace(&mut a.priority, *priority);
                if old != *priority {
                    let text = format!("Priority updated: account {old} -> {priority}");
                    self.priority_lines(t_s, &text, |e, job| {
                        e.account_of(job) == Some(account.as_str())
                    })?;
                }
            }
            SimAction::SetUserPriority(user, priority) => {
                let old = match self.world.users.iter_mut().find(|u| u.name == *user) {
                    Some(u) => std::mem::replace(&mut u.priority, *priority),
                    None => {
                        self.world.users.push(UserRecord {
                            name: user.clone(),
                            priority: *priority,
                            default_account: String::new(),
                        });
                        0
                    }
                };
                if old != *priority {
                    let text = format!("Priority updated: user {old} -> {priority}");
                    self.priority_lines(t_s, &text, |_, job| job.spec.user == *user)?;
                }
            }
        }
        Ok(())
    }

    /// The account a job runs under.
    fn account_of(&self, job: &SimJob) -> Option<&str> {
        let catalog = Catalog::new(&self.world);
        catalog
            .account_of(&job.spec.user, &job.spec.account)
            .map(|a| {
                // Borrow from the world, not the catalog.
                self.world
                    .accounts
                    .iter()
                    .find(|x| x.name == a.name)
                    .map_or("", |x| x.name.as_str())
            })
    }

    /// One `priority` line for each pending or running job `affected`
    /// picks, in job-id order: the job event of the change.
    fn priority_lines(
        &mut self,
        t_s: u64,
        text: &str,
        affected: impl Fn(&Self, &SimJob) -> bool,
    ) -> Result<(), SimError> {
        let mut live: Vec<(JobId, usize)> = self.pending.iter().copied().collect();
        live.extend(self.running.iter().map(|&i| (self.runs[i].id, i)));
        live.sort_unstable();
        for (_, i) in live {
            let job = &self.input.jobs[i];
            if affected(self, job) {
                let name = job.name.clone();
                self.line(&PriorityLine {
                    t_s,
                    event: "priority",
                    job: &name,
                    text,
                })?;
            }
        }
        Ok(())
    }

    /// Decays usage since the last instant and adds what running jobs used
    /// in it (fair share and the usage limits read it).
    fn accrue_usage(&mut self, t_s: u64) {
        let elapsed_s = t_s.saturating_sub(self.usage_at_s) as f64;
        self.usage_at_s = t_s;
        if elapsed_s <= 0.0 || (self.world.accounts.is_empty() && self.world.qos.len() <= 1) {
            return;
        }
        let no_decay: Vec<String> = self
            .world
            .qos
            .iter()
            .filter(|q| q.flags.no_decay)
            .map(|q| q.name.clone())
            .collect();
        let no_decay_refs: Vec<&str> = no_decay.iter().map(String::as_str).collect();
        let half_life_s = self.input.policy.priority.decay_half_life_s;
        let mut usage = std::mem::take(&mut self.world.usage);
        usage.decay(elapsed_s, half_life_s, &no_decay_refs);
        {
            let catalog = Catalog::new(&self.world);
            for &i in &self.running {
                let Status::Running { hosts, per_host } = &self.runs[i].status else {
                    continue;
                };
                if self.runs[i].charge_at_end {
                    continue;
                }
                let spec = &self.input.jobs[i].spec;
                let run = RunCharge {
                    user: &spec.user,
                    account: &spec.account,
                    qos: &spec.qos,
                    hosts: hosts.len() as u64,
                    per_host: *per_host,
                };
                usage.charge_run(&catalog, &run, elapsed_s);
            }
        }
        self.world.usage = usage;
    }
}

/// Runs the simulation to its end (no more work, or `until_s`).
pub fn simulate(input: &SimInput) -> Result<SimOutput, SimError> {
    simulate_with(input, &mut |_| {})
}

/// [`simulate`], calling `observe` after each instant (a progress bar).
pub fn simulate_with(
    input: &SimInput,
    observe: &mut dyn FnMut(Progress),
) -> Result<SimOutput, SimError> {
    let total_cpus: u64 = input
        .hosts
        .iter()
        .map(|h| u64::from(h.inventory.cpus))
        .sum();
    let mut timeline = Timeline {
        points: Vec::new(),
        stride_s: 0,
        next_s: 0,
    };
    let mut engine = Engine {
        input,
        world: Snapshot {
            hosts: input.hosts.clone(),
            pending: Vec::new(),
            running: Vec::new(),
            ..input.world.clone()
        },
        pending_idx: Vec::new(),
        running_idx: Vec::new(),
        usage_at_s: 0,
        host_index: input
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.name.clone(), i))
            .collect(),
        runs: input
            .jobs
            .iter()
            .map(|_| JobRun {
                id: 0,
                status: Status::NotSubmitted,
                held: false,
                start_s: None,
                end: None,
                held_cpus: 0,
                last_reason: None,
                partition: String::new(),
                array: None,
                alloc_id: 0,
                evicted: None,
                waited_s: 0,
                pending_since_s: 0,
                busy_cpu_s_before: 0,
                preempted_by: None,
                borrowed: false,
                charge_at_end: false,
                reclaims: 0,
                borrowed_starts: 0,
                held_emu: 0,
            })
            .collect(),
        pending: BTreeSet::new(),
        running: BTreeSet::new(),
        ends: BinaryHeap::new(),
        lines: String::new(),
        next_job_id: 1,
        next_alloc_id: 1,
        preemption: PreemptCounters::default(),
        preempted_requeued: 0,
        preempted_cancelled: 0,
        claims: BTreeMap::new(),
        exempt_ends: BinaryHeap::new(),
        multipath: multipath_log::Held::default(),
        array_refusals: HashMap::new(),
        layout: None,
    };
    let mut submits: Vec<usize> = (0..input.jobs.len()).collect();
    submits.sort_by_key(|&i| (input.jobs[i].submit_s, i));
    let mut events: Vec<usize> = (0..input.events.len()).collect();
    events.sort_by_key(|&i| (input.events[i].at_s, i));
    let (mut next_submit, mut next_event) = (0usize, 0usize);
    // Begin times (`--begin`) are instants too: a job held only by its
    // begin time must be looked at when that time comes.
    let mut begins: Vec<u64> = input
        .jobs
        .iter()
        .map(|j| j.spec.begin_ms.div_ceil(1000))
        .filter(|&b| b > 0)
        .collect();
    // Admin reservation windows open and close: passes at both edges.
    for r in &input.world.reservations {
        begins.push(r.start_ms.div_ceil(1000));
        begins.push(r.end_ms.div_ceil(1000));
    }
    begins.sort_unstable();
    begins.dedup();
    let mut next_begin = 0usize;
    let mut passes = 0u64;

    // Each turn handles at least the submit, event or end that set `t_s`,
    // so the loop runs at most once per input line plus once per start.
    loop {
        let candidates = [
            submits.get(next_submit).map(|&i| input.jobs[i].submit_s),
            events.get(next_event).map(|&i| input.events[i].at_s),
            engine.ends.peek().map(|Reverse(e)| e.0),
            begins.get(next_begin).copied(),
            engine.exempt_ends.peek().map(|Reverse(t)| *t),
        ];
        let Some(t_s) = candidates.into_iter().flatten().min() else {
            break;
        };
        if input.until_s.is_some_and(|u| t_s > u) {
            break;
        }
        while begins.get(next_begin).is_some_and(|&b| b <= t_s) {
            next_begin += 1;
        }
        while engine
            .exempt_ends
            .peek()
            .is_some_and(|Reverse(e)| *e <= t_s)
        {
            engine.exempt_ends.pop();
        }
        // First claims on freed room end as the cluster's do.
        engine.claims.retain(|_, freed_s| {
            t_s.saturating_mul(1000)
                < freed_s
                    .saturating_mul(1000)
                    .saturating_add(ROOM_FREED_HOLD_MS)
        });
        // Usage up to this instant, before jobs ending now leave the
        // running set: their last interval counts too.
        engine.accrue_usage(t_s);
        while let Some(&Reverse((end_s, _, idx))) = engine.ends.peek() {
            if end_s != t_s {
                break;
            }
            engine.ends.pop();
            // A cancelled job's end is stale: skip it.
            let (Status::Running { .. }, Some(start_s)) =
                (&engine.runs[idx].status, engine.runs[idx].start_s)
            else {
                continue;
            };
            if let Some((due_s, state)) = Engine::natural_end(&input.jobs[idx], start_s) {
                if due_s == t_s {
                    engine.finish(idx, t_s, state)?;
                    continue;
                }
            }
            // An evicted job exits when its grace and stop time are over.
            if engine.runs[idx]
                .evicted
                .as_ref()
                .is_some_and(|e| e.exit_s == t_s)
            {
                engine.evicted_exit(idx, t_s)?;
            }
        }
        while let Some(&idx) = submits.get(next_submit) {
            if input.jobs[idx].submit_s != t_s {
                break;
            }
            next_submit += 1;
            engine.submit(idx, t_s)?;
        }
        while let Some(&e) = events.get(next_event) {
            let event = &input.events[e];
            if event.at_s != t_s {
                break;
            }
            next_event += 1;
            engine.act(&event.action, t_s)?;
        }
        // Without event lines a pass is observable only through its
        // starts, so an instant where no pending job could find room on
        // any up hosts (even ignoring reservations and limits) needs none.
        // It still counts: the pass's outcome is known, not skipped.
        // With preemption or idle-fill a pass may free room by evicting,
        // which that check does not see.
        if input.emit_events
            || input.policy.preemption.enabled
            || input.policy.idle_fill.enabled
            || engine.some_job_may_fit()
        {
            engine.pass(t_s)?;
        }
        passes += 1;
        if timeline.wants(t_s) {
            let busy_cpus: u64 = engine
                .world
                .hosts
                .iter()
                .map(|h| u64::from(h.allocated.cpus))
                .sum();
            timeline.push(TimelinePoint {
                t_s,
                utilization: if total_cpus == 0 {
                    0.0
                } else {
                    busy_cpus as f64 / total_cpus as f64
                },
                pending_jobs: engine.pending.len(),
            });
        }
        observe(Progress {
            t_s,
            jobs_submitted: next_submit,
            jobs_total: input.jobs.len(),
        });
    }

    let stats = stats_of(&engine, input, passes);
    Ok(SimOutput {
        lines: engine.lines,
        stats,
        timeline: timeline.points,
        usage: engine.world.usage,
    })
}

fn stats_of(engine: &Engine, input: &SimInput, passes: u64) -> SimStats {
    let mut jobs = 0usize;
    let mut completed = 0usize;
    let mut waits_s = Vec::new();
    let mut bslds = Vec::new();
    let mut busy_cpu_s = 0u128;
    let mut busy_emu_s = 0u128;
    let mut first_submit_s: Option<u64> = None;
    let mut last_end_s = 0u64;
    let mut borrowed_starts = 0usize;
    let mut reclaims = 0usize;
    for (job, run) in input.jobs.iter().zip(&engine.runs) {
        if run.id == 0 {
            continue; // rejected, or not submitted before the end
        }
        jobs += 1;
        first_submit_s = Some(first_submit_s.map_or(job.submit_s, |f| f.min(job.submit_s)));
        busy_cpu_s += run.busy_cpu_s_before;
        borrowed_starts += run.borrowed_starts as usize;
        reclaims += run.reclaims as usize;
        let Some(start_s) = run.start_s else { continue };
        // Time pending, over every stay in the queue (an evicted job
        // that is pending again counts what it has waited so far).
        let wait_s = run.waited_s;
        waits_s.push(wait_s);
        let Some((end_s, state)) = run.end else {
            continue;
        };
        if state == JobState::Completed {
            completed += 1;
        }
        let run_s = end_s - start_s;
        last_end_s = last_end_s.max(end_s);
        // From submit to the end of its last run: an evicted job's lost
        // runs count against it.
        let response_s = end_s - job.submit_s;
        bslds.push((response_s as f64 / run_s.max(10) as f64).max(1.0));
        busy_cpu_s += u128::from(run.held_cpus) * u128::from(run_s);
        busy_emu_s += u128::from(run.held_emu) * u128::from(run_s);
    }
    let makespan_s = last_end_s.saturating_sub(first_submit_s.unwrap_or(0));
    let total_cpus: u128 = engine
        .world
        .hosts
        .iter()
        .map(|h| u128::from(h.inventory.cpus))
        .sum();
    let mean = |xs: &[f64]| {
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    };
    let waits_f: Vec<f64> = waits_s.iter().map(|&w| w as f64).collect();
    waits_s.sort_unstable();
    // Nearest rank: the smallest wait that at least 95% of jobs do not exceed.
    let p95_wait_s = match waits_s.len() {
        0 => 0,
        n => waits_s[(n * 95).div_ceil(100).saturating_sub(1)],
    };
    let capacity = total_cpus * u128::from(makespan_s);
    let total_emu: u128 = engine
        .world
        .hosts
        .iter()
        .map(|h| u128::from(h.inventory.resources().emu))
        .sum();
    let emu_capacity = total_emu * u128::from(makespan_s);
    SimStats {
        jobs,
        completed,
        mean_wait_s: round6(mean(&waits_f)),
        p95_wait_s,
        mean_bsld: round6(mean(&bslds)),
        utilization: if capacity == 0 {
            0.0
        } else {
            round6(busy_cpu_s as f64 / capacity as f64)
        },
        makespan_s,
        passes,
        preemption: engine.preemption,
        preempted_requeued: engine.preempted_requeued,
        preempted_cancelled: engine.preempted_cancelled,
        borrowed_starts,
        reclaims,
        emu_utilization: if emu_capacity == 0 {
            0.0
        } else {
            round6(busy_emu_s as f64 / emu_capacity as f64)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::RoomyHosts;

    /// Both forms count what a plain count over the hosts does.
    #[test]
    fn roomy_hosts_count_alike_by_value_and_sorted() {
        for free in [
            vec![],
            vec![0, 1, 1, 0, 1],
            vec![4, 0, 2, 2, 7, 1],
            vec![500, 3, 0],
        ] {
            let roomy = RoomyHosts::new(free.clone());
            if free.contains(&500) {
                assert!(matches!(roomy, RoomyHosts::Sorted(_)));
            }
            for cpus in 0..=600 {
                let want = free.iter().filter(|&&c| c >= cpus).count();
                assert_eq!(roomy.with_at_least(cpus), want, "{free:?} at least {cpus}");
            }
        }
    }
}
