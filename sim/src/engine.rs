//! The simulator's engine: a virtual clock that jumps from one instant
//! where something happens (a submit, an exit, an event, a limit running
//! out) to the next, and at each runs the leader's pass over the real
//! state machine (see `cluster`).
//!
//! Within an instant things happen in this order, which is also the order
//! of the output lines: runs exiting (their agents' reports), the leader's
//! time-limit check, submits (in file order), events (in file order), then
//! the pass's starts, evictions, and the pending jobs whose reason changed
//! (in queue order).

use serde::Serialize;

use berth_scheduler::deps::DependencySpec;
use berth_scheduler::model::{Host, JobId, JobSpec, JobState};
use berth_scheduler::pass::{Policy, Snapshot};
use berth_scheduler::preempt::PreemptCounters;
use berth_scheduler::qos::Qos;
use berth_scheduler::usage::Usage;

use crate::SimError;

mod cluster;
mod fit_check;
mod setup;
pub mod submit_spec;

use cluster::Cluster;

/// One submission: what a user's `sbatch` sends, when, and how the job
/// really behaves once it runs (which the cluster learns only from its
/// agents).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimJob {
    /// The scenario's name for it, echoed in the output (`{id}_{task}` for
    /// an array's task).
    pub name: String,
    pub submit_s: u64,
    /// The submit as `sbatch` sends it. The engine sets its `dependency`
    /// from [`SimJob::dependency`] with the ids the cluster gave; an
    /// array's tasks each carry the array's `spec.array` and are submitted
    /// together, with the first.
    pub spec: JobSpec,
    /// How long it really runs; `None` = until its time limit.
    pub runtime_s: Option<u64>,
    /// Non-zero ends it FAILED.
    pub exit_code: i32,
    /// Its dependencies; the job ids in it are indices into the jobs.
    pub dependency: Option<DependencySpec>,
    /// For a task of an array: the index of the array's first task, whose
    /// submit makes them all, and this task's index in the array.
    pub array_task: Option<(usize, u32)>,
    /// Seconds it takes to exit once sent the stop signal (SIGTERM),
    /// bounded by the stop grace.
    pub stop_takes_s: u64,
}

/// The batch script a simulated job names (it never runs).
pub const SIMULATED_COMMAND: &str = "#!/bin/sh\n# simulated\n";

impl SimJob {
    /// A job submitted at `submit_s` that runs until its time limit,
    /// exits 0 and stops at once. A submit must name a command; the
    /// simulator runs none, so one is named for it when `spec` has none.
    pub fn new(name: impl Into<String>, submit_s: u64, mut spec: JobSpec) -> SimJob {
        if spec.command.is_empty() {
            spec.command = SIMULATED_COMMAND.into();
        }
        SimJob {
            name: name.into(),
            submit_s,
            spec,
            runtime_s: None,
            exit_code: 0,
            dependency: None,
            array_task: None,
            stop_takes_s: 0,
        }
    }
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

/// Runs the simulation to its end (no more work, or `until_s`).
pub fn simulate(input: &SimInput) -> Result<SimOutput, SimError> {
    simulate_with(input, &mut |_| {})
}

/// The instants the input itself names: submits, events, begin times and
/// reservation edges (a job held only by its begin time, or a window
/// opening or closing, is looked at then), in order.
struct Agenda {
    submits: Vec<usize>,
    events: Vec<usize>,
    edges: Vec<u64>,
    next_submit: usize,
    next_event: usize,
    next_edge: usize,
}

impl Agenda {
    fn new(input: &SimInput) -> Agenda {
        let mut submits: Vec<usize> = (0..input.jobs.len()).collect();
        submits.sort_by_key(|&i| (input.jobs[i].submit_s, i));
        let mut events: Vec<usize> = (0..input.events.len()).collect();
        events.sort_by_key(|&i| (input.events[i].at_s, i));
        let mut edges: Vec<u64> = input
            .jobs
            .iter()
            .map(|j| j.spec.begin_ms.div_ceil(1000))
            .filter(|&b| b > 0)
            .collect();
        for r in &input.world.reservations {
            edges.push(r.start_ms.div_ceil(1000));
            edges.push(r.end_ms.div_ceil(1000));
        }
        edges.sort_unstable();
        edges.dedup();
        Agenda {
            submits,
            events,
            edges,
            next_submit: 0,
            next_event: 0,
            next_edge: 0,
        }
    }

    fn next_s(&self, input: &SimInput) -> Option<u64> {
        [
            self.submits
                .get(self.next_submit)
                .map(|&i| input.jobs[i].submit_s),
            self.events
                .get(self.next_event)
                .map(|&i| input.events[i].at_s),
            self.edges.get(self.next_edge).copied(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
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
    let mut cluster = Cluster::new(input)?;
    let mut agenda = Agenda::new(input);
    let mut passes = 0u64;
    // A pass with no line to write is observable only through its starts
    // and evictions, so one that could start nothing may be skipped.
    let want_lines =
        input.emit_events || input.policy.preemption.enabled || input.policy.idle_fill.enabled;
    // Each turn handles at least the submit, event, exit or wake that set
    // `t_s`, so the loop runs at most once per input line plus a few times
    // per start.
    loop {
        let next_wake = cluster.wakes.peek().map(|w| w.0);
        let candidates = [agenda.next_s(input), cluster.next_exit_s(), next_wake];
        let Some(t_s) = candidates.into_iter().flatten().min() else {
            break;
        };
        if input.until_s.is_some_and(|u| t_s > u) {
            break;
        }
        while agenda
            .edges
            .get(agenda.next_edge)
            .is_some_and(|&b| b <= t_s)
        {
            agenda.next_edge += 1;
        }
        let mut limit_due = false;
        while cluster.wakes.peek().is_some_and(|w| w.0 <= t_s) {
            cluster.wakes.pop();
            limit_due = true;
        }
        cluster.exits_due(t_s, limit_due)?;
        while let Some(&idx) = agenda.submits.get(agenda.next_submit) {
            if input.jobs[idx].submit_s != t_s {
                break;
            }
            agenda.next_submit += 1;
            cluster.submit(idx, t_s)?;
        }
        while let Some(&e) = agenda.events.get(agenda.next_event) {
            let event = &input.events[e];
            if event.at_s != t_s {
                break;
            }
            agenda.next_event += 1;
            act(&mut cluster, &event.action, t_s)?;
        }
        cluster.pass(t_s, want_lines)?;
        passes += 1;
        if timeline.wants(t_s) {
            timeline.push(TimelinePoint {
                t_s,
                utilization: if total_cpus == 0 {
                    0.0
                } else {
                    cluster.busy_cpus as f64 / total_cpus as f64
                },
                pending_jobs: cluster.pending_jobs(),
            });
        }
        observe(Progress {
            t_s,
            jobs_submitted: agenda.next_submit,
            jobs_total: input.jobs.len(),
        });
    }
    let stats = stats_of(&cluster, input, passes);
    Ok(SimOutput {
        stats,
        timeline: timeline.points,
        usage: cluster.state.data.usage.usage.clone(),
        lines: cluster.lines,
    })
}

/// Carries out one scenario event as the command an admin, a user or a
/// host's agent would send.
fn act(cluster: &mut Cluster, action: &SimAction, t_s: u64) -> Result<(), SimError> {
    use berth_state::policy::PolicyChange;
    use berth_state::{Command, JobAction};
    let now_ms = t_s.saturating_mul(1000);
    let job_ids = |cluster: &Cluster, jobs: &[usize]| -> Vec<u64> {
        jobs.iter()
            .map(|&j| cluster.tallies[j].id)
            .filter(|&id| id != 0)
            .collect()
    };
    let control = |cluster: &mut Cluster, jobs: &[usize], action: JobAction| {
        for job_id in job_ids(cluster, jobs) {
            let command = Command::ControlJob {
                job_id,
                action,
                now_ms,
            };
            // Refused for a job it does not apply to (a hold of a running
            // job), as `scontrol` is: the scenario goes on.
            cluster.act(command, t_s)?;
        }
        Ok::<(), SimError>(())
    };
    let change = match action {
        SimAction::Cancel(jobs) => {
            for job_id in job_ids(cluster, jobs) {
                cluster.act(Command::CancelJob { job_id, now_ms }, t_s)?;
            }
            return Ok(());
        }
        SimAction::Release(jobs) => {
            return control(cluster, jobs, JobAction::Release { admin: false })
        }
        SimAction::Hold(jobs) => return control(cluster, jobs, JobAction::Hold),
        SimAction::HostDown(hosts) => return cluster.hosts_down(hosts, t_s),
        SimAction::HostUp(hosts) => {
            cluster.hosts_up(hosts);
            return Ok(());
        }
        SimAction::ModifyQos(qos) => PolicyChange::UpsertQos((**qos).clone()),
        SimAction::SetAccountPriority(name, priority) => {
            let policy = &cluster.state.data.policy;
            let Some(account) = policy.accounts.get(name) else {
                return Ok(());
            };
            let mut account = account.clone();
            account.priority = *priority;
            PolicyChange::UpsertAccount(account)
        }
        SimAction::SetUserPriority(name, priority) => {
            let policy = &cluster.state.data.policy;
            let mut user = policy.users.get(name).cloned().unwrap_or_else(|| {
                berth_scheduler::assoc::UserRecord {
                    name: name.clone(),
                    priority: 0,
                    default_account: String::new(),
                }
            });
            user.priority = *priority;
            PolicyChange::UpsertUser(user)
        }
    };
    match cluster.act(Command::SetPolicy { change, now_ms }, t_s)? {
        berth_state::Response::Rejected { reason } => Err(SimError::Invalid {
            file: "scenario".into(),
            key: format!("events at {t_s} s"),
            expected: format!("a change the cluster accepts ({reason})"),
        }),
        _ => Ok(()),
    }
}

fn stats_of(cluster: &Cluster, input: &SimInput, passes: u64) -> SimStats {
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
    for (job, run) in input.jobs.iter().zip(&cluster.tallies) {
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
        waits_s.push(run.waited_s);
        let Some((end_s, state)) = run.end else {
            continue;
        };
        if state == JobState::Completed {
            completed += 1;
        }
        let run_s = end_s.saturating_sub(start_s);
        last_end_s = last_end_s.max(end_s);
        // From submit to the end of its last run: an evicted job's lost
        // runs count against it.
        let response_s = end_s.saturating_sub(job.submit_s);
        bslds.push((response_s as f64 / run_s.max(10) as f64).max(1.0));
        busy_cpu_s += u128::from(run.held_cpus) * u128::from(run_s);
        busy_emu_s += u128::from(run.held_emu) * u128::from(run_s);
    }
    let makespan_s = last_end_s.saturating_sub(first_submit_s.unwrap_or(0));
    let total_cpus: u128 = input
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
    let total_emu: u128 = input
        .hosts
        .iter()
        .map(|h| u128::from(h.inventory.resources().emu))
        .sum();
    let emu_capacity = total_emu * u128::from(makespan_s);
    let ratio = |busy: u128, capacity: u128| {
        if capacity == 0 {
            0.0
        } else {
            round6(busy as f64 / capacity as f64)
        }
    };
    SimStats {
        jobs,
        completed,
        mean_wait_s: round6(mean(&waits_f)),
        p95_wait_s,
        mean_bsld: round6(mean(&bslds)),
        utilization: ratio(busy_cpu_s, capacity),
        makespan_s,
        passes,
        preemption: cluster.preemption,
        preempted_requeued: cluster.preempted_requeued,
        preempted_cancelled: cluster.preempted_cancelled,
        borrowed_starts,
        reclaims,
        emu_utilization: ratio(busy_emu_s, emu_capacity),
    }
}
