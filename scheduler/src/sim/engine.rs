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

use serde::Serialize;

use super::SimError;
use crate::fit::fits;
use crate::model::{Host, JobId, JobState, Resources};
use crate::pass::{need_on, schedule, PendingJob, Policy, RunningJob, Snapshot};
use crate::reason::Reason;

/// One submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimJob {
    /// The scenario's name for it, echoed in the output.
    pub name: String,
    pub submit_s: u64,
    pub nodes: u32,
    /// Per host.
    pub request: Resources,
    pub exclusive: bool,
    pub time_limit_s: Option<u64>,
    /// How long it really runs; `None` = until its time limit.
    pub runtime_s: Option<u64>,
    /// Non-zero ends it FAILED.
    pub exit_code: i32,
    pub hold: bool,
    /// Refused at submit, with this error.
    pub rejected: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimAction {
    Cancel,
    /// Releases a held job (Slurm's `scontrol release`).
    Release,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimEvent {
    pub at_s: u64,
    pub action: SimAction,
    /// Index into the jobs.
    pub job: usize,
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct SimInput {
    pub hosts: Vec<Host>,
    pub jobs: Vec<SimJob>,
    pub events: Vec<SimEvent>,
    pub policy: Policy,
    pub until_s: Option<u64>,
    /// Write the event lines (scenarios) or only count (trace replay).
    pub emit_events: bool,
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
}

/// What a run produced: JSON lines (empty unless `emit_events`) and stats.
#[derive(Debug, Clone)]
pub struct SimOutput {
    pub lines: String,
    pub stats: SimStats,
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
}

/// CPUs the job holds on `host`: the whole host when exclusive.
fn need_cpus(host: &Host, job: &SimJob) -> u32 {
    need_on(host, job.request, job.exclusive).map_or(job.request.cpus, |n| n.cpus)
}

/// Rounds a figure to 6 decimals so the output does not carry float noise.
pub(crate) fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

struct Engine<'a> {
    input: &'a SimInput,
    hosts: Vec<Host>,
    host_index: HashMap<String, usize>,
    runs: Vec<JobRun>,
    /// (job id, job index), in queue order.
    pending: BTreeSet<(JobId, usize)>,
    running: BTreeSet<usize>,
    /// (end time, job id, job index).
    ends: BinaryHeap<Reverse<(u64, JobId, usize)>>,
    lines: String,
    next_job_id: JobId,
}

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
        let id = self.next_job_id;
        self.next_job_id += 1;
        let run = &mut self.runs[idx];
        run.id = id;
        run.status = Status::Pending;
        run.held = job.hold;
        self.pending.insert((id, idx));
        self.line(&SubmitLine {
            t_s,
            event: "submit",
            job: &job.name,
            job_id: id,
        })
    }

    fn finish(&mut self, idx: usize, t_s: u64, state: JobState) -> Result<(), SimError> {
        let run = &mut self.runs[idx];
        match std::mem::replace(&mut run.status, Status::Done) {
            Status::Running { hosts, per_host } => {
                for h in hosts {
                    self.hosts[h].allocated = self.hosts[h].allocated.saturating_sub(per_host);
                }
                self.running.remove(&idx);
            }
            Status::Pending => {
                let id = run.id;
                self.pending.remove(&(id, idx));
            }
            other => {
                // Not submitted yet or already over: nothing to end.
                run.status = other;
                return Ok(());
            }
        }
        self.runs[idx].end = Some((t_s, state));
        let name = &self.input.jobs[idx].name;
        self.line(&EndLine {
            t_s,
            event: "end",
            job: name,
            state: state.slurm_name(),
        })
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
        match (job.runtime_s, job.time_limit_s) {
            (Some(run), Some(limit)) if run > limit => Some((start_s + limit, JobState::Timeout)),
            (Some(run), _) => Some((start_s + run, own_end(job.exit_code))),
            (None, Some(limit)) => Some((start_s + limit, own_end(job.exit_code))),
            (None, None) => None,
        }
    }

    fn pass(&mut self, t_s: u64) -> Result<(), SimError> {
        let now_ms = t_s.saturating_mul(1000);
        let pending: Vec<PendingJob> = self
            .pending
            .iter()
            .map(|&(id, idx)| {
                let job = &self.input.jobs[idx];
                PendingJob {
                    id,
                    request: job.request,
                    held: self.runs[idx].held,
                    nodes: job.nodes,
                    exclusive: job.exclusive,
                    time_limit_s: job.time_limit_s.unwrap_or(0),
                    submit_ms: job.submit_s.saturating_mul(1000),
                }
            })
            .collect();
        let running: Vec<RunningJob> = self
            .running
            .iter()
            .filter_map(|&idx| {
                let run = &self.runs[idx];
                let Status::Running { hosts, per_host } = &run.status else {
                    return None;
                };
                Some(RunningJob {
                    id: run.id,
                    hosts: hosts.iter().map(|&h| self.hosts[h].name.clone()).collect(),
                    per_host: *per_host,
                    end_ms: self.input.jobs[idx]
                        .time_limit_s
                        .zip(run.start_s)
                        .map(|(limit_s, start_s)| (start_s + limit_s).saturating_mul(1000)),
                })
            })
            .collect();
        let snapshot = Snapshot {
            hosts: self.hosts.clone(),
            pending,
            running,
        };
        let plan = schedule(&snapshot, &self.input.policy, now_ms);
        // Starts are applied, and reported, in queue order, whether single
        // hosts or gangs.
        let mut placed: BTreeMap<JobId, (Vec<&str>, Resources)> = BTreeMap::new();
        for p in &plan.starts {
            placed.insert(p.job_id, (vec![p.host.as_str()], p.resources));
        }
        for g in &plan.gang_starts {
            placed.insert(
                g.job_id,
                (g.hosts.iter().map(String::as_str).collect(), g.resources),
            );
        }
        let queue: Vec<(JobId, usize)> = self.pending.iter().copied().collect();
        for &(id, idx) in &queue {
            let Some((names, per_host)) = placed.remove(&id) else {
                continue;
            };
            let job = &self.input.jobs[idx];
            let mut hosts = Vec::new();
            for name in names {
                let h = *self
                    .host_index
                    .get(name)
                    .ok_or_else(|| SimError::Internal(format!("plan names unknown host {name}")))?;
                let need = need_on(&self.hosts[h], job.request, job.exclusive)
                    .filter(|&need| fits(&self.hosts[h], need).is_ok())
                    .ok_or_else(|| {
                        SimError::Internal(format!(
                            "plan puts job {} on {name}, which lacks room",
                            job.name
                        ))
                    })?;
                self.hosts[h].allocated = self.hosts[h].allocated.saturating_add(need);
                hosts.push(h);
            }
            let run = &mut self.runs[idx];
            self.pending.remove(&(run.id, idx));
            self.running.insert(idx);
            run.status = Status::Running {
                hosts: hosts.clone(),
                per_host,
            };
            run.start_s = Some(t_s);
            run.held_cpus = hosts
                .iter()
                .map(|&h| u64::from(need_cpus(&self.hosts[h], job)))
                .sum();
            run.last_reason = None;
            if let Some((end_s, _)) = Self::natural_end(job, t_s) {
                self.ends.push(Reverse((end_s, run.id, idx)));
            }
            let names = hosts.iter().map(|&h| self.hosts[h].name.as_str()).collect();
            let line = StartLine {
                t_s,
                event: "start",
                job: &job.name,
                hosts: names,
                borrowed: false,
            };
            if self.input.emit_events {
                let text =
                    serde_json::to_string(&line).map_err(|e| SimError::Internal(e.to_string()))?;
                self.lines.push_str(&text);
                self.lines.push('\n');
            }
        }
        if let Some((id, _)) = placed.into_iter().next() {
            return Err(SimError::Internal(format!(
                "plan starts job {id} that is not pending"
            )));
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
            self.runs[idx].last_reason = Some(reason.clone());
            let name = &self.input.jobs[idx].name;
            self.line(&PendingLine {
                t_s,
                event: "pending",
                job: name,
                reason: reason.code(),
            })?;
        }
        Ok(())
    }
}

/// Runs the simulation to its end (no more work, or `until_s`).
pub fn simulate(input: &SimInput) -> Result<SimOutput, SimError> {
    let mut engine = Engine {
        input,
        hosts: input.hosts.clone(),
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
            })
            .collect(),
        pending: BTreeSet::new(),
        running: BTreeSet::new(),
        ends: BinaryHeap::new(),
        lines: String::new(),
        next_job_id: 1,
    };
    let mut submits: Vec<usize> = (0..input.jobs.len()).collect();
    submits.sort_by_key(|&i| (input.jobs[i].submit_s, i));
    let mut events: Vec<usize> = (0..input.events.len()).collect();
    events.sort_by_key(|&i| (input.events[i].at_s, i));
    let (mut next_submit, mut next_event) = (0usize, 0usize);
    let mut passes = 0u64;

    // Each turn handles at least the submit, event or end that set `t_s`,
    // so the loop runs at most once per input line plus once per start.
    loop {
        let candidates = [
            submits.get(next_submit).map(|&i| input.jobs[i].submit_s),
            events.get(next_event).map(|&i| input.events[i].at_s),
            engine.ends.peek().map(|Reverse(e)| e.0),
        ];
        let Some(t_s) = candidates.into_iter().flatten().min() else {
            break;
        };
        if input.until_s.is_some_and(|u| t_s > u) {
            break;
        }
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
                }
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
            match event.action {
                SimAction::Cancel => engine.finish(event.job, t_s, JobState::Cancelled)?,
                SimAction::Release => engine.runs[event.job].held = false,
            }
        }
        engine.pass(t_s)?;
        passes += 1;
    }

    let stats = stats_of(&engine, input, passes);
    Ok(SimOutput {
        lines: engine.lines,
        stats,
    })
}

fn stats_of(engine: &Engine, input: &SimInput, passes: u64) -> SimStats {
    let mut jobs = 0usize;
    let mut completed = 0usize;
    let mut waits_s = Vec::new();
    let mut bslds = Vec::new();
    let mut busy_cpu_s = 0u128;
    let mut first_submit_s: Option<u64> = None;
    let mut last_end_s = 0u64;
    for (job, run) in input.jobs.iter().zip(&engine.runs) {
        if run.id == 0 {
            continue; // rejected, or not submitted before the end
        }
        jobs += 1;
        first_submit_s = Some(first_submit_s.map_or(job.submit_s, |f| f.min(job.submit_s)));
        let Some(start_s) = run.start_s else { continue };
        let wait_s = start_s - job.submit_s;
        waits_s.push(wait_s);
        let Some((end_s, state)) = run.end else {
            continue;
        };
        if state == JobState::Completed {
            completed += 1;
        }
        let run_s = end_s - start_s;
        last_end_s = last_end_s.max(end_s);
        bslds.push(((wait_s + run_s) as f64 / run_s.max(10) as f64).max(1.0));
        busy_cpu_s += u128::from(run.held_cpus) * u128::from(run_s);
    }
    let makespan_s = last_end_s.saturating_sub(first_submit_s.unwrap_or(0));
    let total_cpus: u128 = engine
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
    }
}
