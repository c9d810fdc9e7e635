//! The supervisor owns the local allocation table. It is the only place
//! that starts or stops jobs: it applies [`reconcile`](crate::reconcile)
//! to every new desired set and after every job event, turns job events
//! into reports, and publishes what runs for the session's heartbeats.
//!
//! The table outlives sessions: jobs keep running while the agent is cut
//! off from the cluster, and the last desired set stays in force until a
//! new one arrives.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::agent::{
    Assignment, AssignmentSet, ExitedReport, RunningAllocation, StartedReport, StopAck,
};
use tokio::sync::{mpsc, watch};

use crate::jobsignal::{self, SignalState};
use crate::outbox::{ExitDelivered, Outbox, Report};
use crate::procgroup;
use crate::reconcile::{self, LocalAlloc, LocalState};
use crate::runner::{self, JobEvent, JobEventKind, JobHandle, LaunchContext};
use crate::statedir;

/// Most allocations kept in the local table (running or awaiting their
/// exit acknowledgement); desired allocations beyond it are not started.
pub const TABLE_CAPACITY_ALLOCS: usize = 4_096;
/// Capacity of the job-event queue from the job tasks, in events.
pub const JOB_EVENT_QUEUE_LEN: usize = 1_024;
/// Longest stop grace used when the agent itself shuts down, in s.
pub const SHUTDOWN_STOP_GRACE_MAX_S: u64 = 5;
/// Extra time on top of the stop grace to wait for exits at shutdown, in
/// ms: covers the SIGKILL and group reaping.
pub const SHUTDOWN_EXIT_MARGIN_MS: u64 = runner::GROUP_KILL_TIMEOUT_MS + 1_000;
/// Most jobs whose newest started alloc id is remembered (the fence
/// against stale assignments); the lowest job ids are forgotten first.
pub const NEWEST_ALLOCS_MAX: usize = 65_536;
/// Most alloc ids remembered as reported "stopped before it started", so
/// each is reported once rather than at every reconcile; the lowest are
/// forgotten first (a second report of one is harmless, only noise).
pub const UNSTARTED_REPORTS_MAX: usize = 4_096;
/// Longest the supervisor sleeps before looking at a `--signal` warning
/// again, in ms: the wall clock may jump, so a far-off due time is not
/// trusted as one long sleep.
pub const SIGNAL_RECHECK_MAX_MS: u64 = 10_000;
/// The launch error of an allocation stopped before this agent received it.
pub const STOPPED_BEFORE_START: &str = "stopped before it started";

/// One allocation this agent has started.
#[derive(Debug)]
struct Entry {
    job_id: u64,
    state: LocalState,
    /// Group leader pid, 0 until the job task reports it.
    pid: i32,
    /// SIGTERM-to-SIGKILL grace, fixed when the allocation was started.
    stop_grace: Duration,
    /// The leader asked for the stop (it left the desired set), so an
    /// AckStop follows the exit report.
    ack_stop: bool,
    /// None once the job has exited.
    handle: Option<JobHandle>,
    /// Found in the state directory at start: until its exit is
    /// delivered it is reported as running, so the cluster waits for the
    /// real exit instead of ending it as lost.
    recovered: bool,
    /// Its `--signal` warning and the `scancel --signal`s it was sent.
    signals: SignalState,
}

/// Inputs the supervisor listens to.
pub struct SupervisorInputs {
    /// Latest desired set from the session (None until the first).
    pub desired_rx: watch::Receiver<Option<AssignmentSet>>,
    /// Exit reports the outbox has settled.
    pub delivered_rx: mpsc::Receiver<ExitDelivered>,
}

/// Owner of the local allocation table.
pub struct Supervisor {
    host: String,
    ctx: Arc<LaunchContext>,
    default_stop_grace: Duration,
    table: BTreeMap<u64, Entry>,
    /// Job id → the highest alloc id started here for it.
    newest: BTreeMap<u64, u64>,
    /// Alloc ids already reported as stopped before they started.
    reported_unstarted: std::collections::BTreeSet<u64>,
    /// The state directory has been read (once per agent process).
    recovered: bool,
    desired: Option<AssignmentSet>,
    /// The leader's wall clock minus this host's, as the last assignment
    /// set showed it (0 until one does): `--signal` warnings are due by
    /// the leader's clock, which placed the job and enforces its limit.
    leader_offset_ms: i64,
    outbox: Outbox,
    events_tx: mpsc::Sender<JobEvent>,
    events_rx: mpsc::Receiver<JobEvent>,
    running_tx: watch::Sender<Vec<RunningAllocation>>,
}

impl Supervisor {
    /// A supervisor with an empty table. `running_tx` receives the list of
    /// running allocations after every change.
    pub fn new(
        ctx: LaunchContext,
        default_stop_grace: Duration,
        outbox: Outbox,
        running_tx: watch::Sender<Vec<RunningAllocation>>,
    ) -> Self {
        let (events_tx, events_rx) = mpsc::channel(JOB_EVENT_QUEUE_LEN);
        Supervisor {
            host: ctx.host.clone(),
            ctx: Arc::new(ctx),
            default_stop_grace,
            table: BTreeMap::new(),
            newest: BTreeMap::new(),
            reported_unstarted: std::collections::BTreeSet::new(),
            recovered: false,
            desired: None,
            leader_offset_ms: 0,
            outbox,
            events_tx,
            events_rx,
            running_tx,
        }
    }

    /// Runs until `shutdown` resolves, then stops every job with a short
    /// grace and waits (bounded) for them to exit.
    pub async fn run(mut self, mut inputs: SupervisorInputs, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        self.recover();
        let mut desired_open = true;
        loop {
            let signal_wait = self.next_signal_wait();
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                Some(ev) = self.events_rx.recv() => self.on_job_event(ev),
                // A `--signal` warning falls due; reconcile (below) sends it.
                _ = tokio::time::sleep(signal_wait.unwrap_or_default()), if signal_wait.is_some() => {}
                Some(d) = inputs.delivered_rx.recv() => self.on_exit_delivered(d.alloc_id),
                changed = inputs.desired_rx.changed(), if desired_open => {
                    if changed.is_err() {
                        // The session is gone; keep what runs as it is.
                        desired_open = false;
                        continue;
                    }
                    let set = inputs.desired_rx.borrow_and_update().clone();
                    if let Some(set) = &set {
                        if set.leader_now_ms > 0 {
                            self.leader_offset_ms =
                                jobsignal::clock_offset_ms(set.leader_now_ms, wall_clock_ms());
                        }
                        tracing::debug!(
                            applied_index = set.applied_index,
                            assignments = set.assignments.len(),
                            "new desired set"
                        );
                    }
                    self.desired = set;
                }
            }
            self.reconcile();
        }
        self.stop_all_for_shutdown().await;
    }

    fn on_job_event(&mut self, ev: JobEvent) {
        let Some(entry) = self.table.get_mut(&ev.alloc_id) else {
            tracing::warn!(
                alloc_id = ev.alloc_id,
                "event for an allocation not in the table"
            );
            return;
        };
        match ev.kind {
            JobEventKind::Started { pid } => {
                entry.pid = pid;
                self.push(Report::Started(StartedReport {
                    host: self.host.clone(),
                    job_id: ev.job_id,
                    alloc_id: ev.alloc_id,
                    pid,
                }));
            }
            JobEventKind::Exited(exit) => {
                entry.state = LocalState::Finished { exit_acked: false };
                entry.handle = None;
                let ack_stop = entry.ack_stop;
                self.push(Report::Exited(ExitedReport {
                    host: self.host.clone(),
                    job_id: ev.job_id,
                    alloc_id: ev.alloc_id,
                    exit_code: exit.exit_code,
                    signal: exit.signal,
                    launch_error: exit.launch_error,
                }));
                if ack_stop {
                    self.push(Report::StopAck(StopAck {
                        host: self.host.clone(),
                        job_id: ev.job_id,
                        alloc_id: ev.alloc_id,
                    }));
                }
            }
        }
        self.publish_running();
    }

    fn on_exit_delivered(&mut self, alloc_id: u64) {
        if let Some(entry) = self.table.get_mut(&alloc_id) {
            if matches!(entry.state, LocalState::Finished { .. }) {
                entry.state = LocalState::Finished { exit_acked: true };
                // The cluster has the exit: nothing left to recover.
                if let Err(e) = self.ctx.state.remove(alloc_id) {
                    tracing::warn!(alloc_id, error = %e, "cannot remove the allocation's record");
                }
                if entry.recovered {
                    entry.recovered = false;
                    self.publish_running();
                }
            }
        }
    }

    /// Remembers that `alloc_id` of `job_id` was started here.
    fn note_started(&mut self, job_id: u64, alloc_id: u64) {
        let newest = self.newest.entry(job_id).or_insert(alloc_id);
        *newest = (*newest).max(alloc_id);
        while self.newest.len() > NEWEST_ALLOCS_MAX {
            self.newest.pop_first();
        }
    }

    /// Reads the state directory an earlier agent process left: jobs still
    /// running are re-adopted, jobs that ended meanwhile have their
    /// recorded exit reported, and jobs that died without a record are
    /// forgotten (the cluster ends them NODE_FAIL when this agent
    /// registers without them).
    pub fn recover(&mut self) {
        if self.recovered {
            return;
        }
        self.recovered = true;
        let records = match self.ctx.state.load(&self.host) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the state directory; no job re-adopted");
                return;
            }
        };
        for r in records {
            self.note_started(r.job_id, r.alloc_id);
            let stop_grace = if r.stop_grace_s > 0 {
                Duration::from_secs(r.stop_grace_s)
            } else {
                self.default_stop_grace
            };
            let (job_id, alloc_id, pid) = (r.job_id, r.alloc_id, r.pid);
            if statedir::alive(r.pid, r.start_ticks) {
                tracing::info!(job_id, alloc_id, pid, "re-adopting a job still running");
                let handle = runner::adopt(r, self.ctx.clone(), self.events_tx.clone());
                self.table.insert(
                    alloc_id,
                    Entry {
                        job_id,
                        state: LocalState::Running {
                            stop_requested: false,
                        },
                        pid,
                        stop_grace,
                        ack_stop: false,
                        handle: Some(handle),
                        recovered: true,
                        signals: SignalState::recovered(),
                    },
                );
            } else if let Some(exit) = self.ctx.state.read_exit(alloc_id) {
                let exit = runner::JobExit::from_record(exit);
                tracing::info!(
                    job_id,
                    alloc_id,
                    exit_code = exit.exit_code,
                    signal = exit.signal,
                    "job ended while the agent was down; reporting its exit"
                );
                runner::kill_remains(&r, &self.ctx);
                self.table.insert(
                    alloc_id,
                    Entry {
                        job_id,
                        state: LocalState::Finished { exit_acked: false },
                        pid,
                        stop_grace,
                        ack_stop: false,
                        handle: None,
                        recovered: true,
                        signals: SignalState::recovered(),
                    },
                );
                self.push(Report::Exited(ExitedReport {
                    host: self.host.clone(),
                    job_id,
                    alloc_id,
                    exit_code: exit.exit_code,
                    signal: exit.signal,
                    launch_error: exit.launch_error,
                }));
            } else {
                tracing::warn!(job_id, alloc_id, pid, "job died while the agent was down and left no exit status; the cluster ends it as lost");
                runner::kill_remains(&r, &self.ctx);
                if let Err(e) = self.ctx.state.remove(alloc_id) {
                    tracing::warn!(alloc_id, error = %e, "cannot remove the allocation's record");
                }
            }
        }
        self.publish_running();
    }

    /// Queues a report; an exit report pushed out of a full outbox counts
    /// as settled, or its entry would stay in the table forever.
    fn push(&mut self, report: Report) {
        if let Some(Report::Exited(r)) = self.outbox.push(report) {
            self.on_exit_delivered(r.alloc_id);
        }
    }

    /// Applies reconcile to the current desired set and table.
    fn reconcile(&mut self) {
        let Some(desired) = &self.desired else {
            // Before the first set, nothing is known to be unwanted.
            return;
        };
        let local: BTreeMap<u64, LocalAlloc> = self
            .table
            .iter()
            .map(|(&id, e)| {
                (
                    id,
                    LocalAlloc {
                        job_id: e.job_id,
                        state: e.state,
                    },
                )
            })
            .collect();
        let plan = reconcile::reconcile_fenced(desired, &local, &self.newest);
        for &alloc_id in &plan.stale {
            tracing::warn!(
                alloc_id,
                "stale assignment (a newer allocation of its job ran here) not started"
            );
        }
        let unstarted: Vec<(u64, u64)> = plan
            .unstarted
            .iter()
            .map(|a| (a.job_id, a.alloc_id))
            .filter(|(_, alloc_id)| !self.reported_unstarted.contains(alloc_id))
            .collect();
        let starts: Vec<Assignment> = plan.start.into_iter().cloned().collect();
        let (stops, forgets) = (plan.stop, plan.forget);
        for (job_id, alloc_id) in unstarted {
            tracing::info!(
                job_id,
                alloc_id,
                "allocation stopped before this agent received it; reporting it ended"
            );
            self.reported_unstarted.insert(alloc_id);
            while self.reported_unstarted.len() > UNSTARTED_REPORTS_MAX {
                self.reported_unstarted.pop_first();
            }
            self.push(Report::Exited(ExitedReport {
                host: self.host.clone(),
                job_id,
                alloc_id,
                exit_code: 0,
                signal: 0,
                launch_error: STOPPED_BEFORE_START.to_string(),
            }));
        }
        let changed = !(starts.is_empty() && stops.is_empty());

        for alloc_id in forgets {
            self.table.remove(&alloc_id);
        }
        for alloc_id in stops {
            if let Some(entry) = self.table.get_mut(&alloc_id) {
                tracing::info!(
                    job_id = entry.job_id,
                    alloc_id,
                    "allocation not assigned any more, stopping"
                );
                entry.state = LocalState::Running {
                    stop_requested: true,
                };
                entry.ack_stop = true;
                if let Some(h) = &entry.handle {
                    h.stop(entry.stop_grace);
                }
            }
        }
        for a in starts {
            self.start(a);
        }
        if changed {
            self.publish_running();
        }
        self.send_signals();
    }

    /// Sends the signals due to running jobs: their `--signal` warning
    /// and new `scancel --signal` requests. A job still launching (no pid
    /// yet) or being stopped gets nothing now; a launching one gets them
    /// once it has started.
    fn send_signals(&mut self) {
        let now_ms = jobsignal::leader_clock_ms(wall_clock_ms(), self.leader_offset_ms);
        let via_shim = self.ctx.shim.is_some();
        let desired: BTreeMap<u64, &Assignment> = self
            .desired
            .iter()
            .flat_map(|d| d.assignments.iter())
            .map(|a| (a.alloc_id, a))
            .collect();
        for (alloc_id, e) in &mut self.table {
            if e.state
                != (LocalState::Running {
                    stop_requested: false,
                })
                || e.pid <= 1
            {
                continue;
            }
            for d in e.signals.poll(desired.get(alloc_id).copied(), now_ms) {
                match jobsignal::deliver(e.pid, via_shim, &d) {
                    Ok(n) => tracing::info!(
                        job_id = e.job_id,
                        alloc_id,
                        signal = d.signal,
                        batch_only = d.batch_only,
                        cause = ?d.cause,
                        processes = n,
                        "signal sent to the job"
                    ),
                    Err(err) => tracing::warn!(
                        job_id = e.job_id,
                        alloc_id,
                        signal = d.signal,
                        error = %err,
                        "cannot signal the job"
                    ),
                }
            }
        }
    }

    /// How long until the next `--signal` warning is due (at most
    /// [`SIGNAL_RECHECK_MAX_MS`]); None when none is waiting.
    fn next_signal_wait(&self) -> Option<Duration> {
        let due_ms = self
            .table
            .values()
            .filter(|e| matches!(e.state, LocalState::Running { .. }))
            .filter_map(|e| e.signals.next_due_ms())
            .min()?;
        let now_ms = jobsignal::leader_clock_ms(wall_clock_ms(), self.leader_offset_ms);
        let wait_ms = due_ms.saturating_sub(now_ms).min(SIGNAL_RECHECK_MAX_MS);
        Some(Duration::from_millis(wait_ms))
    }

    fn start(&mut self, a: Assignment) {
        if self.table.len() >= TABLE_CAPACITY_ALLOCS {
            tracing::warn!(
                job_id = a.job_id,
                alloc_id = a.alloc_id,
                capacity = TABLE_CAPACITY_ALLOCS,
                "allocation table full, not starting"
            );
            return;
        }
        let stop_grace = if a.stop_grace_s > 0 {
            Duration::from_secs(a.stop_grace_s)
        } else {
            self.default_stop_grace
        };
        tracing::info!(
            job_id = a.job_id,
            alloc_id = a.alloc_id,
            "starting allocation"
        );
        let (job_id, alloc_id) = (a.job_id, a.alloc_id);
        self.note_started(job_id, alloc_id);
        let handle = runner::spawn(a, self.ctx.clone(), self.events_tx.clone());
        self.table.insert(
            alloc_id,
            Entry {
                job_id,
                state: LocalState::Running {
                    stop_requested: false,
                },
                pid: 0,
                stop_grace,
                ack_stop: false,
                handle: Some(handle),
                recovered: false,
                signals: SignalState::new(),
            },
        );
    }

    /// Publishes the running allocations (launching ones with pid 0) for
    /// heartbeats and re-registration.
    fn publish_running(&self) {
        let running: Vec<RunningAllocation> = self
            .table
            .iter()
            .filter(|(_, e)| {
                matches!(e.state, LocalState::Running { .. })
                    || (e.recovered && e.state == LocalState::Finished { exit_acked: false })
            })
            .map(|(&alloc_id, e)| RunningAllocation {
                job_id: e.job_id,
                alloc_id,
                pid: e.pid,
            })
            .collect();
        self.running_tx.send_if_modified(|cur| {
            if *cur == running {
                false
            } else {
                *cur = running;
                true
            }
        });
    }

    fn running_count(&self) -> usize {
        self.table
            .values()
            .filter(|e| matches!(e.state, LocalState::Running { .. }))
            .count()
    }

    /// Stops every job with a grace of at most
    /// [`SHUTDOWN_STOP_GRACE_MAX_S`], then waits for their exits (bounded).
    async fn stop_all_for_shutdown(&mut self) {
        let cap = Duration::from_secs(SHUTDOWN_STOP_GRACE_MAX_S);
        let mut longest = Duration::ZERO;
        for entry in self.table.values_mut() {
            if let (LocalState::Running { .. }, Some(h)) = (entry.state, &entry.handle) {
                let grace = entry.stop_grace.min(cap);
                longest = longest.max(grace);
                entry.state = LocalState::Running {
                    stop_requested: true,
                };
                h.stop(grace);
            }
        }
        let n = self.running_count();
        if n == 0 {
            return;
        }
        tracing::info!(
            jobs = n,
            grace_s = longest.as_secs(),
            "agent shutting down, stopping jobs"
        );
        let deadline =
            tokio::time::Instant::now() + longest + Duration::from_millis(SHUTDOWN_EXIT_MARGIN_MS);
        while self.running_count() > 0 {
            match tokio::time::timeout_at(deadline, self.events_rx.recv()).await {
                Ok(Some(ev)) => self.on_job_event(ev),
                Ok(None) => break,
                Err(_) => {
                    self.kill_remaining();
                    break;
                }
            }
        }
    }

    /// Last resort at shutdown (e.g. a stop begun earlier with a long
    /// grace): SIGKILL what still runs, so no job outlives the agent.
    fn kill_remaining(&self) {
        for (alloc_id, e) in &self.table {
            if matches!(e.state, LocalState::Running { .. }) && e.pid > 1 {
                tracing::warn!(
                    alloc_id,
                    pgid = e.pid,
                    "job still running at shutdown deadline, killing"
                );
                if let Err(err) = procgroup::signal_group(e.pid, libc::SIGKILL) {
                    tracing::warn!(alloc_id, pgid = e.pid, error = %err, "cannot SIGKILL process group");
                }
            }
        }
    }
}

/// Now on the wall clock, ms since the epoch: the leader stamps placements
/// with its wall clock, and a job's time limit counts from there.
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;
    use tokio::sync::oneshot;

    /// Longest any awaited condition may take.
    const DEADLINE: Duration = Duration::from_secs(20);

    struct Harness {
        outbox: Outbox,
        running_rx: watch::Receiver<Vec<RunningAllocation>>,
        desired_tx: watch::Sender<Option<AssignmentSet>>,
        stop_tx: Option<oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
        _dir: tempfile::TempDir,
    }

    fn start_harness() -> Harness {
        // Orphans of killed groups come to the test process to be reaped.
        crate::procgroup::become_subreaper().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(100);
        let (running_tx, running_rx) = watch::channel(Vec::new());
        let (desired_tx, desired_rx) = watch::channel(None);
        // Never fed: exit acknowledgements are not under test here.
        let (_delivered_tx, delivered_rx) = mpsc::channel(8);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let sup = Supervisor::new(
            LaunchContext {
                host: "h1".into(),
                work_dir: dir.path().to_path_buf(),
                shim: None,
                state: crate::statedir::StateDir::open(&dir.path().join("state")).unwrap(),
                cgroups: None,
                job_user: crate::user::JobUser::Agent,
                allow_root_jobs: true,
                instance: "t".into(),
                step_secret: None,
                ca_file: None,
            },
            Duration::from_secs(10),
            outbox.clone(),
            running_tx,
        );
        let task = tokio::spawn(sup.run(
            SupervisorInputs {
                desired_rx,
                delivered_rx,
            },
            async {
                let _ = stop_rx.await;
            },
        ));
        Harness {
            outbox,
            running_rx,
            desired_tx,
            stop_tx: Some(stop_tx),
            task,
            _dir: dir,
        }
    }

    fn assignment(job_id: u64, alloc_id: u64, command: &str, stop_grace_s: u64) -> Assignment {
        Assignment {
            job_id,
            alloc_id,
            spec: Some(JobSpec {
                command: command.into(),
                ..Default::default()
            }),
            stop_grace_s,
            ..Default::default()
        }
    }

    fn set(applied_index: u64, assignments: Vec<Assignment>) -> Option<AssignmentSet> {
        Some(AssignmentSet {
            applied_index,
            assignments,
            ..Default::default()
        })
    }

    async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let until = tokio::time::Instant::now() + DEADLINE;
        while !cond() {
            assert!(
                tokio::time::Instant::now() < until,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// (kind, alloc_id, signal for exits) of every queued report.
    fn reports(outbox: &Outbox) -> Vec<(&'static str, u64, i32)> {
        outbox
            .snapshot()
            .iter()
            .map(|r| {
                let signal = match r {
                    Report::Exited(e) => e.signal,
                    _ => 0,
                };
                (r.kind(), r.alloc_id(), signal)
            })
            .collect()
    }

    #[tokio::test]
    async fn starts_desired_and_stops_undesired_with_ack() {
        let mut h = start_harness();
        h.desired_tx
            .send_replace(set(1, vec![assignment(1, 10, "sleep 100", 10)]));
        let rx = h.running_rx.clone();
        wait_until("alloc 10 running with a pid", || {
            rx.borrow().iter().any(|r| r.alloc_id == 10 && r.pid > 1)
        })
        .await;

        h.desired_tx.send_replace(set(2, vec![]));
        let outbox = h.outbox.clone();
        wait_until("stop ack", || outbox.snapshot().len() == 3).await;
        assert_eq!(
            reports(&h.outbox),
            vec![
                ("started", 10, 0),
                ("exited", 10, libc::SIGTERM),
                ("stop-ack", 10, 0)
            ]
        );
        assert!(h.running_rx.borrow().is_empty());

        if let Some(tx) = h.stop_tx.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(DEADLINE, &mut h.task)
            .await
            .expect("supervisor shuts down")
            .unwrap();
    }

    #[tokio::test]
    async fn a_stopping_alloc_it_never_received_is_reported_once_unstarted() {
        let mut h = start_harness();
        let stopped_early = AssignmentSet {
            applied_index: 1,
            stopping: vec![assignment(5, 50, "sleep 100", 10)],
            ..Default::default()
        };
        h.desired_tx.send_replace(Some(stopped_early.clone()));
        let outbox = h.outbox.clone();
        wait_until("the unstarted report", || outbox.snapshot().len() == 1).await;
        // The same set again (a resend) adds no second report.
        h.desired_tx.send_replace(Some(AssignmentSet {
            applied_index: 2,
            ..stopped_early
        }));
        h.desired_tx
            .send_replace(set(3, vec![assignment(6, 60, "sleep 100", 10)]));
        wait_until("alloc 60 started", || outbox.snapshot().len() == 2).await;
        match &h.outbox.snapshot()[0] {
            Report::Exited(e) => {
                assert_eq!((e.job_id, e.alloc_id, e.exit_code, e.signal), (5, 50, 0, 0));
                assert_eq!(e.launch_error, STOPPED_BEFORE_START);
            }
            other => panic!("expected the exit of alloc 50, got {other:?}"),
        }
        assert!(matches!(&h.outbox.snapshot()[1], Report::Started(s) if s.alloc_id == 60));
        if let Some(tx) = h.stop_tx.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(DEADLINE, &mut h.task)
            .await
            .expect("supervisor shuts down")
            .unwrap();
    }

    #[tokio::test]
    async fn superseded_alloc_stops_before_the_new_one_starts() {
        let mut h = start_harness();
        h.desired_tx
            .send_replace(set(1, vec![assignment(1, 10, "sleep 100", 10)]));
        let rx = h.running_rx.clone();
        wait_until("alloc 10 running", || {
            rx.borrow().iter().any(|r| r.alloc_id == 10 && r.pid > 1)
        })
        .await;

        // Requeued: the same job with a new allocation.
        h.desired_tx
            .send_replace(set(2, vec![assignment(1, 11, "sleep 100", 10)]));
        let outbox = h.outbox.clone();
        wait_until("alloc 11 started", || {
            outbox
                .snapshot()
                .iter()
                .any(|r| matches!(r, Report::Started(s) if s.alloc_id == 11))
        })
        .await;
        assert_eq!(
            reports(&h.outbox),
            vec![
                ("started", 10, 0),
                ("exited", 10, libc::SIGTERM),
                ("stop-ack", 10, 0),
                ("started", 11, 0)
            ]
        );

        if let Some(tx) = h.stop_tx.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(DEADLINE, &mut h.task)
            .await
            .expect("supervisor shuts down")
            .unwrap();
        // Stopped for the shutdown, not by the leader: no stop ack.
        assert_eq!(reports(&h.outbox)[4..], [("exited", 11, libc::SIGTERM)]);
    }

    #[tokio::test]
    async fn shutdown_kills_term_ignoring_jobs_after_the_short_grace() {
        let mut h = start_harness();
        h.desired_tx.send_replace(set(
            1,
            vec![assignment(
                2,
                20,
                "trap '' TERM; touch trapped; sleep 100",
                1,
            )],
        ));
        let trapped = h._dir.path().join("trapped");
        wait_until("the job's TERM trap", || trapped.exists()).await;
        if let Some(tx) = h.stop_tx.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(DEADLINE, &mut h.task)
            .await
            .expect("supervisor shuts down")
            .unwrap();
        assert_eq!(
            reports(&h.outbox),
            vec![("started", 20, 0), ("exited", 20, libc::SIGKILL)]
        );
    }

    /// Shuts the harness's supervisor down.
    async fn shut_down(mut h: Harness) {
        if let Some(tx) = h.stop_tx.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(DEADLINE, &mut h.task)
            .await
            .expect("supervisor shuts down")
            .unwrap();
    }

    /// A job that writes `ready`, then `got` when USR1 arrives (the short
    /// sleeps let dash run the trap promptly), for up to 20 s.
    fn usr1_trap_command(dir: &std::path::Path) -> String {
        let d = dir.display();
        format!(
            "trap 'echo got > {d}/got' USR1; echo > {d}/ready; \
             i=0; while [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done"
        )
    }

    #[tokio::test]
    async fn warn_signal_arrives_its_seconds_before_the_time_limit() {
        for batch_only in [false, true] {
            let h = start_harness();
            let marks = tempfile::tempdir().unwrap();
            let mut a = assignment(3, 30, &usr1_trap_command(marks.path()), 10);
            // A 3 s limit and USR1@2: due 1 s after the placement.
            a.start_ms = wall_clock_ms();
            let placed = std::time::Instant::now();
            if let Some(spec) = a.spec.as_mut() {
                spec.time_limit_s = 3;
                spec.warn_signal = libc::SIGUSR1 as u32;
                spec.warn_signal_before_s = 2;
                spec.warn_signal_batch_only = batch_only;
            }
            h.desired_tx.send_replace(set(1, vec![a]));
            let got = marks.path().join("got");
            wait_until("the USR1 marker", || got.exists()).await;
            let after = placed.elapsed();
            assert!(
                after >= Duration::from_millis(950) && after < Duration::from_millis(2_000),
                "USR1 came {after:?} after the placement, expected about 1 s (batch_only {batch_only})"
            );
            // The job goes on running: a signal is not a stop.
            assert!(h.running_rx.borrow().iter().any(|r| r.alloc_id == 30));
            assert_eq!(reports(&h.outbox), vec![("started", 30, 0)]);
            shut_down(h).await;
        }
    }

    #[tokio::test]
    async fn scancel_signal_is_sent_once_to_the_running_job() {
        let h = start_harness();
        let marks = tempfile::tempdir().unwrap();
        let a = assignment(4, 40, &usr1_trap_command(marks.path()), 10);
        h.desired_tx.send_replace(set(1, vec![a.clone()]));
        let ready = marks.path().join("ready");
        wait_until("the job's trap is set", || ready.exists()).await;
        let mut signalled = a.clone();
        signalled.signals = vec![berth_proto::agent::SignalRequest {
            seq: 1,
            signal: libc::SIGUSR1 as u32,
            batch_only: true,
        }];
        h.desired_tx.send_replace(set(2, vec![signalled.clone()]));
        let got = marks.path().join("got");
        wait_until("the USR1 marker", || got.exists()).await;
        std::fs::remove_file(&got).unwrap();
        // The same request in a later set is not sent again.
        h.desired_tx.send_replace(set(3, vec![signalled]));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!got.exists(), "the request was sent twice");
        assert!(h.running_rx.borrow().iter().any(|r| r.alloc_id == 40));
        shut_down(h).await;
    }
}
