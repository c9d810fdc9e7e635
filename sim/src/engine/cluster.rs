//! The simulated cluster: the real state machine (`berth_state::SmState`)
//! fed the commands a leader and its agents would propose, in the order
//! they would. The engine decides nothing about jobs itself; it plays
//! the outside world (the clock, the hosts, each job's run time and how
//! long it takes to stop) and writes down what the state did.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};

use berth_scheduler::catalog::Catalog;
use berth_scheduler::evict::requeued_detail;
use berth_scheduler::model::{HostState, JobId, JobState};
use berth_scheduler::pass::{Plan, Shape, Snapshot};
use berth_scheduler::preempt::{exempt_s, PreemptCounters};
use berth_scheduler::reason::Reason;
use berth_scheduler::EvictMark;
use berth_state::leader_pass::{self, PassMemory};
use berth_state::{Command, Dirty, JobRecord, Response, SmState};

use super::fit_check::{self, HostRoom};
use super::{EndLine, PendingLine, PreemptLine, PriorityLine, StartLine, SubmitLine};
use super::{RejectedLine, SimInput};
use crate::{multipath_log, SimError};

/// Passes one instant may run: each round but the last evicted jobs that
/// exited at once, and a job is evicted at most once per run, so a few
/// rounds settle any instant; the bound keeps a bug from looping.
const ROUNDS_PER_INSTANT_MAX: usize = 4;

/// The process id a simulated agent reports for every launch.
const SIMULATED_PID: i32 = 1;

/// How a run's process ends, as its agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Exit {
    /// On its own, with the job's exit code.
    Own,
    /// Killed by the stop the cluster asked for (SIGTERM, or SIGKILL at
    /// the end of the grace).
    Stopped,
}

/// What the engine notes of each job for its lines and figures. Only
/// observed from the state; nothing here decides what happens to a job.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// 0 until submitted (ids start at 1).
    pub id: JobId,
    /// The allocation it runs under; 0 while it does not run.
    pub alloc_id: u64,
    pub start_s: Option<u64>,
    pub end: Option<(u64, JobState)>,
    /// Seconds it spent pending before its current run (or so far), and
    /// since when it is pending now.
    pub waited_s: u64,
    pub pending_since_s: u64,
    /// CPUs and emulator units its current run holds across its hosts.
    pub held_cpus: u64,
    pub held_emu: u64,
    /// CPU-seconds of earlier runs cut short by an eviction.
    pub busy_cpu_s_before: u128,
    last_reason: Option<Reason>,
    /// The eviction under way, as the plan's applier marked it.
    evicted: Option<EvictMark>,
    /// The job it was evicted for, until its first reason line after
    /// going back to the queue.
    preempted_by: Option<JobId>,
    pub borrowed_starts: u32,
    pub reclaims: u32,
}

pub(super) struct Cluster<'a> {
    pub input: &'a SimInput,
    pub state: SmState,
    memory: PassMemory,
    /// Hosts whose agents are silent: the leader sees them down.
    down: BTreeSet<String>,
    /// Job index by job id (ids are dense from 1).
    idx_of_id: Vec<usize>,
    pub tallies: Vec<Tally>,
    /// (time, job id, alloc id, how): exits the agents will report.
    exits: BinaryHeap<Reverse<(u64, JobId, u64, Exit)>>,
    /// Allocations whose stop is under way (their exit is due already).
    stopping: HashSet<u64>,
    /// Instants where a running job's limit or exempt window runs out: the
    /// leader's periodic pass would look then.
    pub wakes: BinaryHeap<Reverse<u64>>,
    pub lines: String,
    pub preemption: PreemptCounters,
    pub preempted_requeued: u64,
    pub preempted_cancelled: u64,
    multipath: multipath_log::Held,
    /// CPUs allocated over all hosts now.
    pub busy_cpus: u64,
    /// Each job's resource paths (its alternatives, or its own request),
    /// for the check that skips passes that could start nothing.
    paths: Vec<Vec<Shape>>,
    /// Why an array was refused, by its first task's index: its later
    /// tasks' lines say the same.
    refusals: HashMap<usize, String>,
}

impl<'a> Cluster<'a> {
    pub fn new(input: &'a SimInput) -> Result<Cluster<'a>, SimError> {
        let mut cluster = Cluster {
            input,
            state: SmState::default(),
            memory: PassMemory::default(),
            down: BTreeSet::new(),
            idx_of_id: Vec::new(),
            tallies: input.jobs.iter().map(|_| Tally::default()).collect(),
            exits: BinaryHeap::new(),
            stopping: HashSet::new(),
            wakes: BinaryHeap::new(),
            lines: String::new(),
            preemption: PreemptCounters::default(),
            preempted_requeued: 0,
            preempted_cancelled: 0,
            multipath: multipath_log::Held::default(),
            busy_cpus: 0,
            refusals: HashMap::new(),
            paths: input.jobs.iter().map(|j| paths_of(&j.spec)).collect(),
        };
        for command in super::setup::commands(input) {
            let (what, command) = command?;
            match cluster.apply(command, 0)? {
                Response::HostRegistered | Response::PolicySet => {}
                Response::Rejected { reason } => {
                    return Err(SimError::Invalid {
                        file: "scenario".into(),
                        key: what,
                        expected: format!("what the cluster accepts ({reason})"),
                    })
                }
                other => {
                    return Err(SimError::Internal(format!(
                        "setting up {what} answered {other:?}"
                    )))
                }
            }
        }
        Ok(cluster)
    }

    pub(super) fn line<T: serde::Serialize>(&mut self, line: &T) -> Result<(), SimError> {
        if self.input.emit_events {
            let text =
                serde_json::to_string(line).map_err(|e| SimError::Internal(e.to_string()))?;
            self.lines.push_str(&text);
            self.lines.push('\n');
        }
        Ok(())
    }

    fn name_of(&self, id: JobId) -> &str {
        self.idx_of(id)
            .map_or("", |idx| self.input.jobs[idx].name.as_str())
    }

    fn idx_of(&self, id: JobId) -> Option<usize> {
        let at = usize::try_from(id).ok()?.checked_sub(1)?;
        self.idx_of_id.get(at).copied()
    }

    /// Applies `command` as the next log entry at `t_s` and writes the
    /// lines for what it changed.
    fn apply(&mut self, command: Command, t_s: u64) -> Result<Response, SimError> {
        let index = self.state.applied_index() + 1;
        let mut dirty = Dirty::default();
        let response = self.state.apply(&command, &mut dirty);
        self.state.set_applied_index(index);
        for id in dirty.jobs {
            self.observe(id, t_s)?;
        }
        Ok(response)
    }

    /// Notes how job `id` changed and writes its line.
    fn observe(&mut self, id: JobId, t_s: u64) -> Result<(), SimError> {
        let (Some(idx), Some(r)) = (self.idx_of(id), self.state.job(id)) else {
            return Ok(());
        };
        let running_alloc = match (&r.job.state, &r.job.alloc) {
            (JobState::Running, Some(a)) => a.alloc_id,
            _ => 0,
        };
        let was = self.tallies[idx].alloc_id;
        if was != 0 && running_alloc != was {
            self.run_ended(idx, t_s)?;
        }
        let r = self.state.job(id).ok_or_else(|| missing(id))?;
        if running_alloc != 0 && running_alloc != was {
            self.run_started(idx, t_s)?;
        } else if r.job.state.is_final() && self.tallies[idx].end.is_none() && running_alloc == 0 {
            // Ended without running now (a cancel while pending; an
            // evicted run's end is written by `run_ended`).
            let state = r.job.state;
            let tally = &mut self.tallies[idx];
            tally.end = Some((t_s, state));
            if was == 0 {
                self.end_line(idx, t_s, state.slurm_name(), None)?;
            }
        }
        self.schedule_stop(id, t_s)
    }

    /// A run of job `idx` began at `t_s`.
    fn run_started(&mut self, idx: usize, t_s: u64) -> Result<(), SimError> {
        let id = self.tallies[idx].id;
        let r = self.state.job(id).ok_or_else(|| missing(id))?;
        let alloc = r.job.alloc.clone().ok_or_else(|| missing(id))?;
        let hosts: Vec<String> = alloc.hosts().map(str::to_string).collect();
        let borrowed = r.job.borrowed;
        let chosen = alloc.alternative.saturating_sub(1) as usize;
        let n = hosts.len() as u64;
        let tally = &mut self.tallies[idx];
        tally.alloc_id = alloc.alloc_id;
        tally.start_s = Some(t_s);
        tally.end = None;
        tally.waited_s += t_s.saturating_sub(tally.pending_since_s);
        tally.preempted_by = None;
        tally.last_reason = None;
        tally.evicted = None;
        tally.held_cpus = u64::from(alloc.resources.cpus) * n;
        tally.held_emu = u64::from(alloc.resources.emu) * n;
        tally.borrowed_starts += u32::from(borrowed);
        self.busy_cpus += self.tallies[idx].held_cpus;
        // Its agent launches it and says so.
        let started = Command::JobStarted {
            job_id: id,
            alloc_id: alloc.alloc_id,
            host: alloc.host.clone(),
            pid: SIMULATED_PID,
            now_ms: t_s.saturating_mul(1000),
        };
        self.apply(started, t_s)?;
        self.schedule_exit(idx, t_s, alloc.alloc_id);
        self.wake_at_exempt_end(id, t_s);
        if let Some(held) = self.multipath.held.remove(&id) {
            let name = &self.input.jobs[idx].name;
            let line = multipath_log::dispatch_line(t_s, name, chosen, &held);
            self.line(&line)?;
        }
        let name = &self.input.jobs[idx].name;
        let line = StartLine {
            t_s,
            event: "start",
            job: name,
            hosts: hosts.iter().map(String::as_str).collect(),
            borrowed,
        };
        self.line(&line)
    }

    /// When job `idx`, started at `t_s`, reaches its own end: its run time,
    /// or its time limit (when it runs longer the leader's time-limit check
    /// stops it then).
    fn schedule_exit(&mut self, idx: usize, t_s: u64, alloc_id: u64) {
        let job = &self.input.jobs[idx];
        let id = self.tallies[idx].id;
        let limit_s = (job.spec.time_limit_s > 0).then_some(job.spec.time_limit_s);
        let run_s = match (job.runtime_s, limit_s) {
            (Some(run), Some(limit)) if run > limit => {
                self.wakes.push(Reverse(t_s.saturating_add(limit)));
                return;
            }
            (Some(run), _) => run,
            (None, Some(limit)) => limit,
            (None, None) => return,
        };
        self.exits.push(Reverse((
            t_s.saturating_add(run_s),
            id,
            alloc_id,
            Exit::Own,
        )));
    }

    /// Asks for a pass when job `id`, started at `t_s`, stops being exempt
    /// from preemption or from idle-fill's reclaim.
    fn wake_at_exempt_end(&mut self, id: JobId, t_s: u64) {
        let policy = &self.input.policy;
        if let Some(job) = self.state.job(id).map(|r| &r.job) {
            let window_s = policy.idle_fill.exempt_window_s(job.reclaims);
            let opportunistic = job.borrowed || self.idle_fill_preemptable(job);
            if policy.idle_fill.enabled && opportunistic && window_s > 0 {
                self.wakes.push(Reverse(t_s.saturating_add(window_s)));
            }
        }
        if !policy.preemption.enabled {
            return;
        }
        let Some(view) = self.state.running_view(id) else {
            return;
        };
        let policy_objects = self.state.policy_snapshot();
        let exempt = exempt_s(&view, &Catalog::new(&policy_objects), &policy.preemption);
        if exempt > 0 {
            self.wakes.push(Reverse(t_s.saturating_add(exempt)));
        }
    }

    /// Whether `job`'s QOS is `idle_fill_preemptable` (its runs are then
    /// reclaimable even within quota).
    fn idle_fill_preemptable(&self, job: &berth_scheduler::model::Job) -> bool {
        self.state
            .data
            .policy
            .qos
            .get(&job.spec.qos)
            .is_some_and(|q| q.idle_fill_preemptable)
    }

    /// Job `idx`'s run ended at `t_s` (its exit reported, or its host lost).
    fn run_ended(&mut self, idx: usize, t_s: u64) -> Result<(), SimError> {
        let id = self.tallies[idx].id;
        let r = self.state.job(id).ok_or_else(|| missing(id))?;
        let state = r.job.state;
        let reclaims = r.job.reclaims;
        let tally = &mut self.tallies[idx];
        self.busy_cpus = self.busy_cpus.saturating_sub(tally.held_cpus);
        self.stopping.remove(&tally.alloc_id);
        tally.alloc_id = 0;
        tally.reclaims = reclaims;
        let mark = tally.evicted.take();
        if state == JobState::Pending {
            // Back in the queue (an eviction, `scontrol requeue`, a lost
            // host with `--requeue`): its run is over, the job is not.
            let run_s = t_s.saturating_sub(tally.start_s.unwrap_or(t_s));
            tally.busy_cpu_s_before += u128::from(tally.held_cpus) * u128::from(run_s);
            tally.pending_since_s = t_s;
            tally.last_reason = None;
            tally.preempted_by = mark.as_ref().map(|m| m.for_job);
        } else {
            tally.end = Some((t_s, state));
        }
        let Some(mark) = mark else {
            let word = if state == JobState::Pending {
                "REQUEUED"
            } else {
                state.slurm_name()
            };
            return self.end_line(idx, t_s, word, None);
        };
        if state == JobState::Pending {
            self.preempted_requeued += 1;
        } else {
            self.preempted_cancelled += 1;
        }
        self.end_line(idx, t_s, "PREEMPTED", Some(&mark))
    }

    fn end_line(
        &mut self,
        idx: usize,
        t_s: u64,
        state: &'static str,
        evicted: Option<&EvictMark>,
    ) -> Result<(), SimError> {
        let by = evicted.map(|m| self.name_of(m.for_job).to_string());
        let line = EndLine {
            t_s,
            event: "end",
            job: &self.input.jobs[idx].name,
            state,
            requeue: evicted.map(|m| m.requeue),
            cause: evicted.map(|m| m.cause.word()),
            by: by.as_deref(),
        };
        self.line(&line)
    }

    /// The agent's side of a stop the state asked for (cancel, time limit,
    /// requeue): the job exits after its own stop time, at most the grace.
    /// Evictions are carried out by [`Cluster::evictions`], which writes
    /// their lines first.
    fn schedule_stop(&mut self, id: JobId, t_s: u64) -> Result<(), SimError> {
        let Some(r) = self.state.job(id) else {
            return Ok(());
        };
        let Some(alloc) = r
            .job
            .alloc
            .as_ref()
            .filter(|_| r.job.state == JobState::Running)
        else {
            return Ok(());
        };
        if !r.job.stopping() || r.job.evicted.is_some() || self.stopping.contains(&alloc.alloc_id) {
            return Ok(());
        }
        let alloc_id = alloc.alloc_id;
        let exit_s = t_s.saturating_add(self.stop_takes_s(r));
        self.stop_at(id, alloc_id, exit_s, t_s)
    }

    /// Seconds job `r` takes to exit once sent the stop signal.
    fn stop_takes_s(&self, r: &JobRecord) -> u64 {
        let grace_s = self.state.stop_grace_s(r, self.input.stop_grace_s);
        let grace_s = if grace_s == 0 {
            self.input.stop_grace_s
        } else {
            grace_s
        };
        self.idx_of(r.job.id)
            .map_or(0, |idx| self.input.jobs[idx].stop_takes_s)
            .min(grace_s)
    }

    /// The run `alloc_id` of job `id` exits, stopped, at `exit_s`: now, or
    /// later through the exit queue.
    fn stop_at(&mut self, id: JobId, alloc_id: u64, exit_s: u64, t_s: u64) -> Result<(), SimError> {
        self.stopping.insert(alloc_id);
        if exit_s <= t_s {
            return self.report_exit(id, alloc_id, Exit::Stopped, t_s);
        }
        self.exits
            .push(Reverse((exit_s, id, alloc_id, Exit::Stopped)));
        Ok(())
    }

    /// The agent reports run `alloc_id` of job `id` over.
    fn report_exit(
        &mut self,
        id: JobId,
        alloc_id: u64,
        how: Exit,
        t_s: u64,
    ) -> Result<(), SimError> {
        let Some(r) = self.state.job(id) else {
            return Ok(());
        };
        let Some(alloc) = r.job.alloc.as_ref() else {
            return Ok(());
        };
        if alloc.alloc_id != alloc_id || r.job.state != JobState::Running {
            return Ok(()); // a stale exit: that run is over already
        }
        let (exit_code, signal) = match how {
            Exit::Own => {
                let idx = self.idx_of(id).ok_or_else(|| missing(id))?;
                (self.input.jobs[idx].exit_code, 0)
            }
            Exit::Stopped => (0, 15),
        };
        let command = Command::JobExited {
            job_id: id,
            alloc_id,
            host: alloc.host.clone(),
            exit_code,
            signal,
            launch_error: String::new(),
            now_ms: t_s.saturating_mul(1000),
        };
        self.apply(command, t_s).map(drop)
    }

    /// Exits due at `t_s`, in (job id, allocation) order; then the
    /// leader's time-limit check when a limit runs out now.
    pub fn exits_due(&mut self, t_s: u64, limit_due: bool) -> Result<(), SimError> {
        while let Some(&Reverse((at_s, id, alloc_id, how))) = self.exits.peek() {
            if at_s > t_s {
                break;
            }
            self.exits.pop();
            self.report_exit(id, alloc_id, how, t_s)?;
        }
        if limit_due {
            if let Some(command) = leader_pass::time_limit_command(&self.state, t_s * 1000) {
                self.apply(command, t_s)?;
            }
        }
        Ok(())
    }

    /// The next instant an exit is due.
    pub fn next_exit_s(&self) -> Option<u64> {
        self.exits.peek().map(|Reverse(e)| e.0)
    }

    /// Submits job `idx` (with an array's first task, the whole array).
    pub fn submit(&mut self, idx: usize, t_s: u64) -> Result<(), SimError> {
        let job = &self.input.jobs[idx];
        if let Some((first, _)) = job.array_task.filter(|&(first, _)| first != idx) {
            return self.array_task_submitted(idx, first, t_s);
        }
        let mut spec = job.spec.clone();
        if let Some(dependency) = &job.dependency {
            spec.dependency = self.dependency_text(dependency)?;
        }
        let command = Command::SubmitJob {
            request_id: format!("sim-{idx}"),
            spec,
            now_ms: t_s.saturating_mul(1000),
        };
        match self.apply(command, t_s)? {
            Response::Submitted { job_id, .. } => self.submitted(idx, job_id, t_s),
            Response::Rejected { reason } => {
                let line = RejectedLine {
                    t_s,
                    event: "rejected",
                    job: &self.input.jobs[idx].name,
                    error: &reason,
                };
                self.line(&line)?;
                self.refusals.insert(idx, reason);
                Ok(())
            }
            other => Err(SimError::Internal(format!("a submit answered {other:?}"))),
        }
    }

    /// Job `idx` is job `job_id` (for an array, its first task); its tasks
    /// take the ids the state gave them.
    fn submitted(&mut self, idx: usize, job_id: JobId, t_s: u64) -> Result<(), SimError> {
        let tasks: Vec<usize> = match self.input.jobs[idx].array_task {
            None => vec![idx],
            Some(_) => (idx..self.input.jobs.len())
                .take_while(|&i| self.input.jobs[i].array_task.map(|a| a.0) == Some(idx))
                .collect(),
        };
        for (k, &task) in tasks.iter().enumerate() {
            let id = job_id + k as JobId;
            let r = self.state.job(id).ok_or_else(|| missing(id))?;
            let want = self.input.jobs[task].array_task.map(|a| a.1);
            if want.is_some_and(|t| r.job.spec.array_task_id != t) {
                return Err(SimError::Internal(format!(
                    "array task {} got job {id}, task {}",
                    self.input.jobs[task].name, r.job.spec.array_task_id
                )));
            }
            let at = usize::try_from(id - 1).map_err(|_| missing(id))?;
            if self.idx_of_id.len() != at {
                return Err(SimError::Internal(format!("job id {id} out of order")));
            }
            self.idx_of_id.push(task);
            let tally = &mut self.tallies[task];
            tally.id = id;
            tally.pending_since_s = t_s;
            // It may have started or ended in the submit's own apply.
            self.observe(id, t_s)?;
        }
        self.submit_line(idx, t_s)
    }

    /// A later task of an array: submitted with the array's first task
    /// (its line, or its refusal, written now, in file order).
    fn array_task_submitted(&mut self, idx: usize, first: usize, t_s: u64) -> Result<(), SimError> {
        if self.tallies[idx].id != 0 {
            return self.submit_line(idx, t_s);
        }
        let error = self.refusals.get(&first).cloned().unwrap_or_default();
        let line = RejectedLine {
            t_s,
            event: "rejected",
            job: &self.input.jobs[idx].name,
            error: &error,
        };
        self.line(&line)
    }

    fn submit_line(&mut self, idx: usize, t_s: u64) -> Result<(), SimError> {
        let line = SubmitLine {
            t_s,
            event: "submit",
            job: &self.input.jobs[idx].name,
            job_id: self.tallies[idx].id,
        };
        self.line(&line)
    }

    /// `dependency` (job indices) in Slurm's words with the cluster's ids.
    fn dependency_text(
        &self,
        dependency: &berth_scheduler::deps::DependencySpec,
    ) -> Result<String, SimError> {
        let mut spec = dependency.clone();
        for dep in &mut spec.deps {
            for job in &mut dep.jobs {
                let idx = usize::try_from(*job).unwrap_or(usize::MAX);
                let id = self.tallies.get(idx).map_or(0, |t| t.id);
                if id == 0 {
                    return Err(SimError::Internal(format!(
                        "a dependency names job {} before its submit",
                        self.input.jobs.get(idx).map_or("?", |j| j.name.as_str())
                    )));
                }
                *job = id;
            }
        }
        Ok(spec.to_string())
    }

    /// Applies a scenario's command for jobs and policy at `t_s`.
    pub fn act(&mut self, command: Command, t_s: u64) -> Result<Response, SimError> {
        let before = self.events_before(&command);
        let response = self.apply(command, t_s)?;
        if let Some(before) = before {
            self.priority_lines(&before, t_s)?;
        }
        Ok(response)
    }

    /// For a policy change: how many events each live job had before it,
    /// so the events it adds ("Priority updated ...") become lines.
    fn events_before(&self, command: &Command) -> Option<Vec<(JobId, u64)>> {
        if !matches!(command, Command::SetPolicy { .. }) || !self.input.emit_events {
            return None;
        }
        let mut live: Vec<JobId> = self.state.pending_ids().collect();
        live.extend(self.state.running_ids());
        live.sort_unstable();
        Some(
            live.into_iter()
                .filter_map(|id| Some((id, self.state.job(id)?.events_total)))
                .collect(),
        )
    }

    fn priority_lines(&mut self, before: &[(JobId, u64)], t_s: u64) -> Result<(), SimError> {
        for &(id, seen) in before {
            let Some(r) = self.state.job(id) else {
                continue;
            };
            let new = r.events_total.saturating_sub(seen) as usize;
            let texts: Vec<String> = r.events[r.events.len().saturating_sub(new)..]
                .iter()
                .filter(|e| e.message.starts_with("Priority updated"))
                .map(|e| e.message.clone())
                .collect();
            let Some(idx) = self.idx_of(id) else { continue };
            for text in texts {
                let line = PriorityLine {
                    t_s,
                    event: "priority",
                    job: &self.input.jobs[idx].name,
                    text: &text,
                };
                self.line(&line)?;
            }
        }
        Ok(())
    }

    /// The hosts' agents go silent: the leader fails their jobs.
    pub fn hosts_down(&mut self, hosts: &[String], t_s: u64) -> Result<(), SimError> {
        self.down.extend(hosts.iter().cloned());
        let command = Command::HostsSilent {
            hosts: hosts.to_vec(),
            timeout_ms: 0,
            now_ms: t_s.saturating_mul(1000),
        };
        self.apply(command, t_s).map(drop)
    }

    /// The hosts' agents are heard again (they run nothing).
    pub fn hosts_up(&mut self, hosts: &[String]) {
        for h in hosts {
            self.down.remove(h);
        }
    }

    /// The instant's pass, again while an eviction frees room at once (as
    /// a leader's next pass would when the victim's exit is reported).
    pub fn pass(&mut self, t_s: u64, want_lines: bool) -> Result<(), SimError> {
        for round in 0..=ROUNDS_PER_INSTANT_MAX {
            let last = round == ROUNDS_PER_INSTANT_MAX;
            if !self.pass_round(t_s, last, want_lines)? {
                break;
            }
        }
        Ok(())
    }

    /// The leader's view of the cluster for a pass at `t_s`.
    pub fn snapshot(&self, t_s: u64) -> Snapshot {
        let down = &self.down;
        self.state
            .pass_input(|h| {
                if down.contains(h) {
                    HostState::Down
                } else {
                    HostState::Up
                }
            })
            .into_snapshot_at(t_s.saturating_mul(1000))
    }

    /// One pass and its plan; true when a victim exited at once and the
    /// pass should run again.
    fn pass_round(&mut self, t_s: u64, last: bool, want_lines: bool) -> Result<bool, SimError> {
        let now_ms = t_s.saturating_mul(1000);
        if !want_lines && !self.some_job_may_fit() {
            return Ok(false);
        }
        let snapshot = self.snapshot(t_s);
        let plan = self.memory.schedule(snapshot, &self.input.policy, now_ms);
        self.preemption.add(&plan.preemption);
        if let Some(command) =
            leader_pass::apply_plan_command(&plan, self.state.applied_index(), now_ms)
        {
            self.apply(command, t_s)?;
        }
        if self.evictions(&plan, t_s)? && !last {
            return Ok(true);
        }
        if self.input.emit_events {
            self.reason_lines(&plan, t_s)?;
            self.note_multipath(&plan, t_s)?;
        }
        Ok(false)
    }

    /// Carries out the plan's evictions the applier accepted, in the
    /// plan's order: a `preempt` line, and the victim's stop. True when
    /// one exited at once.
    fn evictions(&mut self, plan: &Plan, t_s: u64) -> Result<bool, SimError> {
        let now_ms = t_s.saturating_mul(1000);
        let mut exited = false;
        for e in &plan.evictions {
            let Some(idx) = self.idx_of(e.job) else {
                continue;
            };
            let Some(r) = self.state.job(e.job) else {
                continue;
            };
            let Some(mark) = r.job.evicted.clone().filter(|m| {
                m.at_ms == now_ms && m.for_job == e.for_job && self.tallies[idx].evicted.is_none()
            }) else {
                continue; // dropped by the re-check
            };
            let Some(alloc_id) = r.job.alloc.as_ref().map(|a| a.alloc_id) else {
                continue;
            };
            let exit_s = t_s.saturating_add(self.stop_takes_s(r));
            self.tallies[idx].evicted = Some(mark.clone());
            let by = self.name_of(e.for_job).to_string();
            let line = PreemptLine {
                t_s,
                event: "preempt",
                job: &by,
                victim: &self.input.jobs[idx].name,
                cause: mark.cause.word(),
                requeue: mark.requeue,
                grace_s: mark.grace_s,
                exit_s,
            };
            self.line(&line)?;
            exited |= exit_s <= t_s;
            self.stop_at(e.job, alloc_id, exit_s, t_s)?;
        }
        Ok(exited)
    }

    /// A `pending` line for each pending job whose reason changed, in
    /// queue order. Held jobs are not in the pass: their reason is the
    /// hold, from the record, as the leader's `squeue` says.
    fn reason_lines(&mut self, plan: &Plan, t_s: u64) -> Result<(), SimError> {
        let pending: Vec<JobId> = self.state.pending_ids().collect();
        for id in pending {
            let Some(r) = self.state.job(id) else {
                continue;
            };
            let Some(reason) = r.job.hold_reason().or(plan.reasons.get(&id).copied()) else {
                continue;
            };
            let Some(idx) = self.idx_of(id) else {
                continue;
            };
            if self.tallies[idx].last_reason == Some(reason) {
                continue;
            }
            self.tallies[idx].last_reason = Some(reason);
            // A job back in the queue after an eviction says so once.
            let pass_detail = plan.details.get(&id).map(String::as_str);
            let detail = match self.tallies[idx].preempted_by.take() {
                Some(by) => Some(requeued_detail(self.name_of(by), pass_detail)),
                None => pass_detail.map(str::to_string),
            };
            let line = PendingLine {
                t_s,
                event: "pending",
                job: &self.input.jobs[idx].name,
                reason: reason.code(),
                detail: detail.as_deref(),
            };
            self.line(&line)?;
        }
        Ok(())
    }

    /// A `reserve` line for each pending job whose held alternatives
    /// changed.
    fn note_multipath(&mut self, plan: &Plan, t_s: u64) -> Result<(), SimError> {
        for change in self.multipath.update(&plan.multipath) {
            let pending = self
                .state
                .job(change.job_id)
                .is_some_and(|r| r.job.state == JobState::Pending);
            let Some(idx) = self.idx_of(change.job_id).filter(|_| pending) else {
                continue; // started or ended meanwhile
            };
            let line = multipath_log::reserve_line(t_s, &self.input.jobs[idx].name, &change);
            self.line(&line)?;
        }
        Ok(())
    }

    /// Whether a pass now could start anything (see `fit_check`); a
    /// drained host counts as up, which only makes the answer `true` more
    /// often.
    fn some_job_may_fit(&self) -> bool {
        if self.state.pending_len() == 0 {
            return false;
        }
        let up: Vec<HostRoom> = self
            .state
            .data
            .hosts
            .values()
            .filter(|h| !self.down.contains(&h.name))
            .map(|h| HostRoom {
                total: h.inventory.resources(),
                allocated: h.allocated,
            })
            .collect();
        let paths = self
            .state
            .pending_ids()
            .filter_map(|id| self.idx_of(id))
            .map(|idx| self.paths[idx].as_slice());
        fit_check::some_job_may_fit(&up, paths)
    }

    /// Jobs pending now, for the timeline.
    pub fn pending_jobs(&self) -> usize {
        self.state.pending_len()
    }
}

/// The resource paths a pass tries for `spec`, as the state's pending
/// view has them (a spec that does not parse is refused at submit).
fn paths_of(spec: &berth_scheduler::model::JobSpec) -> Vec<Shape> {
    let pending = berth_state::pending_of(spec);
    pending.paths().to_vec()
}

fn missing(id: JobId) -> SimError {
    SimError::Internal(format!("job {id} is not in the state"))
}
