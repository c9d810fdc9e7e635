//! Berth's replicated state machine: the state every node keeps in memory
//! and its deterministic [`SmState::apply`]. The cluster's store
//! (`berth-raft-store`) applies committed commands with it and persists
//! what each batch changed (see [`Dirty`]); the simulator (`berth-sim`)
//! applies the same commands on a virtual clock.
//!
//! Pure like `berth-scheduler`: no I/O, no clock, no Raft. Time arrives
//! inside each command, stamped by the leader.
//!
//! - [`command`]: what can be proposed (`Request`, versioned) and answered.
//! - [`policy`]: the replicated policy objects (QOS, accounts, users,
//!   partitions) and usage, and how a change to them is validated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};

use berth_scheduler::{
    fits, Allocation, Eviction, GangMember, GangPlacement, Host, HostState, Inventory, Job, JobId,
    JobSpec, JobState, PendingJob, Placement, Resources, RunningJob, Snapshot,
};
use serde::{Deserialize, Serialize};

use crate::policy::{PolicyTables, UsageState};

pub mod command;
pub mod leader_pass;
pub mod policy;

pub use command::{Command, JobAction, JobUpdate, Request, Response, COMMAND_VERSION};

mod array;
mod evict;
mod lifecycle;
mod pending_views;
mod policy_apply;
mod reservations;
mod room_now;
mod spec_rules;
mod steps;
pub use steps::{StepRecord, StepReport, STEPS_PER_JOB_MAX};
mod update;

pub use evict::ROOM_FREED_HOLD_MS;
pub use reservations::{RESERVATIONS_MAX, RESERVATION_NAMES_MAX};

pub use array::ARRAY_TASKS_MAX;

pub use policy_apply::pending_of;

pub use spec_rules::{DEPENDENCY_BYTES_MAX, FEATURES_PER_JOB_MAX, NAME_BYTES_MAX};

/// Events kept per job; older ones are dropped first.
pub const EVENTS_PER_JOB_MAX: usize = 128;
/// Client request ids are remembered for the last this-many jobs: a retry of
/// a submit older than that would make a second job. Submitters retry for
/// seconds, so 100,000 jobs of history is ample and bounds the table.
pub const REQUEST_IDS_RETAINED_JOBS: u64 = 100_000;
/// Longest request id accepted, in bytes.
pub const REQUEST_ID_BYTES_MAX: usize = 128;
/// Longest command accepted, in bytes.
pub const COMMAND_BYTES_MAX: usize = 64 * 1024;

/// One line of a job's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    /// 1, 2, 3, ... per job, never reused: a watcher resumes after the last
    /// it saw and sees a gap when older events were dropped. 0 on events
    /// stored before sequence numbers existed.
    #[serde(default)]
    pub seq: u64,
    pub time_ms: u64,
    pub kind: String,
    pub message: String,
}

/// A job with its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: Job,
    /// The last [`EVENTS_PER_JOB_MAX`] events.
    pub events: Vec<JobEvent>,
    /// Events ever recorded for the job (the last one's `seq`).
    #[serde(default)]
    pub events_total: u64,
    /// The last [`SIGNALS_PER_JOB_MAX`] signals asked for while it ran
    /// (`scancel --signal`); only those of its current allocation reach
    /// the agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<SignalRequest>,
    /// Signals ever asked for the job (the last one's `seq`).
    #[serde(default, skip_serializing_if = "u64_is_zero")]
    pub signals_total: u64,
    /// Its srun steps, the last [`steps::STEPS_PER_JOB_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

fn u64_is_zero(n: &u64) -> bool {
    *n == 0
}

/// Most signal requests kept per job: more than an agent can miss between
/// two assignment sets in practice; older ones are dropped first.
pub const SIGNALS_PER_JOB_MAX: usize = 16;

/// One `scancel --signal` of a running job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalRequest {
    /// 1 for the job's first signal, then one more for each.
    pub seq: u64,
    /// The allocation it was asked for; an agent running another one
    /// never sees it.
    pub alloc_id: u64,
    /// Linux signal number.
    pub signal: u32,
    /// Only the batch shell.
    pub batch_only: bool,
}

impl JobRecord {
    /// A job just submitted: pending, no history yet.
    fn new_pending(id: JobId, spec: JobSpec, submit_ms: u64) -> JobRecord {
        JobRecord {
            job: Job {
                id,
                spec,
                state: JobState::Pending,
                submit_ms,
                end_ms: 0,
                alloc: None,
                exit_code: 0,
                exit_signal: 0,
                cancel_requested: false,
                time_limit_reached: false,
                requeue_requested: false,
                admin_hold: false,
                restarts: 0,
                borrowed: false,
                reclaims: 0,
                evicted: None,
                room_freed_ms: 0,
                admin_priority: 0,
                requeued_for: 0,
            },
            events: Vec::new(),
            events_total: 0,
            signals: Vec::new(),
            signals_total: 0,
            steps: Vec::new(),
        }
    }

    fn push_event(&mut self, time_ms: u64, kind: &str, message: String) {
        if self.events.len() >= EVENTS_PER_JOB_MAX {
            self.events.remove(0);
        }
        self.events_total += 1;
        self.events.push(JobEvent {
            seq: self.events_total,
            time_ms,
            kind: kind.to_string(),
            message,
        });
    }
}

/// Longest drain reason a host registration may carry, in bytes.
pub const HOST_DRAIN_REASON_BYTES_MAX: usize = 1024;
/// Longest step address an agent may register, in bytes.
pub const HOST_STEP_ADDR_BYTES_MAX: usize = 255;

/// What a registration says about a host beside its inventory.
#[derive(Debug, Clone, Copy)]
struct HostExtras<'a> {
    drain_reason: &'a str,
    step_addr: &'a str,
}

/// A registered host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub name: String,
    pub inventory: Inventory,
    pub registered_ms: u64,
    /// Why its agent drained the host (empty: not drained). A drained host
    /// takes no new work; what runs there goes on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub drain_reason: String,
    /// Where its agent serves srun steps (empty: nowhere).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub step_addr: String,
    /// Sum of running allocations. Derived from the jobs; rebuilt on load.
    #[serde(skip)]
    pub allocated: Resources,
}

impl HostRecord {
    /// The host as the scheduler's `fits` sees it: `state` from liveness,
    /// except that an up host its agent drained is `Drain`.
    pub fn view(&self, state: HostState) -> Host {
        let state = if state == HostState::Up && !self.drain_reason.is_empty() {
            HostState::Drain
        } else {
            state
        };
        Host {
            name: self.name.clone(),
            inventory: self.inventory.clone(),
            state,
            allocated: self.allocated,
            partitions: Vec::new(),
            features: self.inventory.features.clone(),
        }
    }
}

/// The persisted part of the state, as a snapshot carries it. Where the
/// state stands in the Raft log is the store's to keep, not the state's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SmData {
    pub counters: Counters,
    pub jobs: BTreeMap<JobId, JobRecord>,
    pub hosts: BTreeMap<String, HostRecord>,
    pub request_ids: BTreeMap<String, JobId>,
    /// QOS, accounts, users and partitions (format 2 stores without them
    /// read as empty).
    #[serde(default)]
    pub policy: PolicyTables,
    #[serde(default)]
    pub usage: UsageState,
}

/// Id counters. Ids come from here, never from leader memory (invariant 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub next_job_id: JobId,
    pub next_alloc_id: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            next_job_id: 1,
            next_alloc_id: 1,
        }
    }
}

/// What one apply batch changed, for the store to persist.
#[derive(Debug, Default)]
pub struct Dirty {
    pub jobs: BTreeSet<JobId>,
    pub hosts: BTreeSet<String>,
    pub request_ids_put: BTreeMap<String, JobId>,
    pub request_ids_deleted: BTreeSet<String>,
}

/// The state machine in memory, with indexes derived from the data.
#[derive(Debug, Default)]
pub struct SmState {
    pub data: SmData,
    /// The last log entry applied (see [`SmState::applied_index`]).
    applied_index: u64,
    pending: BTreeSet<JobId>,
    running: BTreeSet<JobId>,
    request_id_of_job: BTreeMap<JobId, String>,
    /// Pending jobs with a first claim on room their victims freed
    /// (`Job::room_freed_ms` set).
    room_claims: BTreeSet<JobId>,
    /// What the submit limits count (unfinished jobs per QOS, account and
    /// user), kept between submits so that a submit costs O(1) rather
    /// than a walk of every unfinished job; dropped by any other command
    /// (see [`SmState::apply`]) and rebuilt by the next submit. Derived
    /// data: never stored, the same on every node.
    submit_counts: Option<policy_apply::KeptSubmitCounts>,
    /// What the pass sees of each pending job as far as its record alone
    /// decides, kept between passes (see [`pending_views`]). Derived
    /// data, never stored; behind a mutex because snapshots are taken
    /// under the shared read lock.
    pending_views: Mutex<pending_views::PendingViews>,
}

/// A scheduler snapshot whose pending jobs are still to be taken from
/// their kept views ([`SmState::pass_input`]); holds no lock.
pub struct PassInput {
    snapshot: Snapshot,
    extras: PendingExtras,
    views: Vec<Arc<pending_views::PendingView>>,
    /// When the snapshot's usage was last accrued, and the half-life:
    /// [`PassInput::into_snapshot_at`] brings it up to the pass's time.
    usage_at_ms: u64,
    half_life_s: u64,
}

impl PassInput {
    /// The snapshot, pending jobs in queue order, for a pass at `now_ms`:
    /// a first claim on freed room older than [`ROOM_FREED_HOLD_MS`] then
    /// is over, though no plan has yet been applied to drop it.
    /// Its usage is what it will be at `now_ms`, as `apply` would accrue
    /// it then: fair share and the usage limits judge the pass's present,
    /// not the last command that happened to accrue.
    pub fn into_snapshot_at(mut self, now_ms: u64) -> Snapshot {
        self.extras
            .claims_ms
            .retain(|_, freed_ms| now_ms < freed_ms.saturating_add(ROOM_FREED_HOLD_MS));
        if !self.snapshot.accounts.is_empty() && now_ms > self.usage_at_ms {
            let span = policy_apply::Accrual {
                at_ms: self.usage_at_ms,
                now_ms,
                half_life_s: self.half_life_s,
            };
            let runs = self.snapshot.running.iter().map(policy_apply::view_charge);
            let usage = policy_apply::accrued(&self.snapshot, span, runs);
            self.snapshot.usage = usage;
        }
        self.into_snapshot()
    }

    /// The snapshot, pending jobs in queue order, with every first claim
    /// the state holds.
    pub fn into_snapshot(self) -> Snapshot {
        Snapshot {
            pending: self
                .views
                .iter()
                .map(|v| self.extras.pending_job(v))
                .collect(),
            ..self.snapshot
        }
    }
}

/// What a pending job's kept view lacks, judged from other jobs.
struct PendingExtras {
    /// Why its dependencies hold it, for those they hold.
    dependency: BTreeMap<JobId, berth_scheduler::Reason>,
    /// Victims are stopping for these: the room is theirs first.
    room_freed: BTreeSet<JobId>,
    /// Victims left for these, at that time (`Job::room_freed_ms`): the
    /// room is theirs first for [`ROOM_FREED_HOLD_MS`].
    claims_ms: BTreeMap<JobId, u64>,
}

impl PendingExtras {
    /// The job as the pass sees it: its kept view itself (no copy) unless
    /// its dependencies hold it or room was freed for it.
    fn pending_job(&self, view: &pending_views::PendingView) -> Arc<PendingJob> {
        let id = view.job.id;
        let dependency = self.dependency.get(&id).cloned();
        let room_freed = (!self.room_freed.is_empty() && self.room_freed.contains(&id))
            || (!self.claims_ms.is_empty() && self.claims_ms.contains_key(&id));
        debug_assert!(view.job.dependency.is_none() && !view.job.room_freed);
        if dependency.is_none() && !room_freed {
            return Arc::clone(&view.job);
        }
        Arc::new(PendingJob {
            dependency,
            room_freed,
            ..(*view.job).clone()
        })
    }
}

/// The state shared between openraft's state machine and the node's readers
/// (API, leader loop, agent streams). Locks are held briefly, never across
/// an await.
pub type SharedState = Arc<RwLock<SmState>>;

impl SmState {
    /// Builds the state and its indexes from persisted data.
    pub fn from_data(mut data: SmData) -> SmState {
        for host in data.hosts.values_mut() {
            host.allocated = Resources::default();
        }
        // Histories stored before events had sequence numbers get them
        // now, in order (every node loads the same data, so they agree).
        for record in data.jobs.values_mut() {
            if record.events_total == 0 && !record.events.is_empty() {
                for (n, event) in record.events.iter_mut().enumerate() {
                    event.seq = n as u64 + 1;
                }
                record.events_total = record.events.len() as u64;
            }
        }
        let mut state = SmState::default();
        for (id, record) in &data.jobs {
            match record.job.state {
                JobState::Pending => {
                    state.pending.insert(*id);
                    if record.job.room_freed_ms != 0 {
                        state.room_claims.insert(*id);
                    }
                }
                JobState::Running => {
                    state.running.insert(*id);
                    if let Some(alloc) = &record.job.alloc {
                        for name in alloc.hosts() {
                            if let Some(host) = data.hosts.get_mut(name) {
                                host.allocated = host.allocated.saturating_add(alloc.resources);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (request_id, job_id) in &data.request_ids {
            state.request_id_of_job.insert(*job_id, request_id.clone());
        }
        state.data = data;
        state
    }

    pub fn job(&self, id: JobId) -> Option<&JobRecord> {
        self.data.jobs.get(&id)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &JobRecord> {
        self.data.jobs.values()
    }

    pub fn hosts(&self) -> impl Iterator<Item = &HostRecord> {
        self.data.hosts.values()
    }

    pub fn pending_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.pending.iter().copied()
    }

    /// How many jobs are pending, held ones included.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    pub fn running_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.running.iter().copied()
    }

    /// The index of the last log entry applied (0: none), as the store
    /// last set it.
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// Records that the log entry `index` has been applied; the store
    /// calls it for every entry, commands and others alike.
    pub fn set_applied_index(&mut self, index: u64) {
        debug_assert!(index >= self.applied_index || index == 0);
        self.applied_index = index;
    }

    /// Running allocations that should run on `host` now: what its agent
    /// converges on (invariant 6). A job whose cancel was committed is not
    /// in the set, so its agent stops it.
    pub fn assignments_for(&self, host: &str) -> Vec<&JobRecord> {
        self.running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter(|r| !r.job.stopping() && !r.job.spec.interactive)
            .filter(|r| r.job.alloc.as_ref().is_some_and(|a| a.host == host))
            .collect()
    }

    /// Each host's step service address, in the order given ("" where
    /// its agent registered none).
    pub fn step_addrs<'a>(&self, hosts: impl Iterator<Item = &'a str>) -> Vec<String> {
        hosts
            .map(|h| {
                self.data
                    .hosts
                    .get(h)
                    .map(|rec| rec.step_addr.clone())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Allocations that hold `host` without running a batch script there
    /// (a multi-host job's other hosts, every host of an interactive
    /// allocation), not stopping: their srun steps may start tasks there
    /// (`AssignmentSet::members`).
    pub fn members_on(&self, host: &str) -> Vec<&JobRecord> {
        self.running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter(|r| !r.job.stopping())
            .filter(|r| {
                r.job.alloc.as_ref().is_some_and(|a| {
                    a.gang.iter().any(|m| m.host == host)
                        || (r.job.spec.interactive && a.host == host)
                })
            })
            .collect()
    }

    /// Running allocations on `host` whose stop is committed: they left
    /// the assignment set, and an agent that never received one must be
    /// told about it to report it ended (see `AssignmentSet::stopping`).
    pub fn stopping_on(&self, host: &str) -> Vec<&JobRecord> {
        self.running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter(|r| r.job.stopping())
            .filter(|r| r.job.alloc.as_ref().is_some_and(|a| a.host == host))
            .collect()
    }

    /// The scheduler's view: hosts with what is allocated, pending jobs in
    /// queue order. `host_state` says, from leader soft state, whether each
    /// host's agent is alive.
    /// Held jobs are in it, as they are in the queue (`explain` shows what
    /// one would need once released).
    pub fn scheduler_snapshot(&self, host_state: impl Fn(&str) -> HostState) -> Snapshot {
        self.input(host_state, true).into_snapshot()
    }

    /// What the leader's pass reads: [`Self::scheduler_snapshot`] without
    /// the held jobs, taken at the cost of a reference count per pending
    /// job. Held jobs wait for a release, which changes their record; no
    /// pass could start one, and their reason comes from the record
    /// (`JobHeldUser`, `JobHeldAdmin`), so a pile of them costs passes
    /// nothing. The pending jobs are taken from their kept views by
    /// [`PassInput::into_snapshot`], which the leader calls after letting
    /// go of the state's read lock (apply waits for it). That shares each
    /// view, and copies only the few jobs whose dependencies hold them or
    /// that have room freed for them (copying every one took 40 ms for
    /// 100,000).
    pub fn pass_input(&self, host_state: impl Fn(&str) -> HostState) -> PassInput {
        self.input(host_state, false)
    }

    fn input(&self, host_state: impl Fn(&str) -> HostState, with_held: bool) -> PassInput {
        let mut views = self.pending_views.lock().unwrap_or_else(|p| p.into_inner());
        views.sync(&self.pending, &self.data.jobs);
        debug_assert!(
            views.iter().all(|view| {
                self.data
                    .jobs
                    .get(&view.job.id)
                    .is_some_and(|r| pending_views::view_of(r) == *view)
            }),
            "a pending job's record changed without being marked dirty"
        );
        let shared = views.shared(with_held);
        drop(views);
        let (snapshot, extras) = self.snapshot_parts(host_state, shared.iter().map(|v| &**v));
        PassInput {
            snapshot,
            extras,
            views: shared,
            usage_at_ms: self.data.usage.at_ms,
            half_life_s: self.data.policy.decay_half_life_s(),
        }
    }

    /// [`Self::scheduler_snapshot`] for checks inside `apply`, with every
    /// host up: pending jobs (when `with_pending`) are read afresh from
    /// their records and no view is kept, since `apply` may be holding a
    /// record tentatively changed (an update's tasks are checked against
    /// the state with each other changed, and put back on a refusal).
    pub(crate) fn snapshot_in_apply(&self, with_pending: bool) -> Snapshot {
        let fresh: Vec<pending_views::PendingView> = if with_pending {
            self.pending
                .iter()
                .filter_map(|id| self.data.jobs.get(id))
                .map(pending_views::view_of)
                .collect()
        } else {
            Vec::new()
        };
        let (snapshot, extras) = self.snapshot_parts(|_| HostState::Up, fresh.iter());
        Snapshot {
            pending: fresh.iter().map(|v| extras.pending_job(v)).collect(),
            ..snapshot
        }
    }

    /// The snapshot but its pending jobs, and what their `views` lack:
    /// the dependency reasons of those that name dependencies, and which
    /// have room freed for them.
    fn snapshot_parts<'v>(
        &self,
        host_state: impl Fn(&str) -> HostState,
        views: impl Iterator<Item = &'v pending_views::PendingView> + Clone,
    ) -> (Snapshot, PendingExtras) {
        let hosts = self
            .data
            .hosts
            .values()
            .map(|h| {
                let mut view = h.view(host_state(&h.name));
                view.partitions = self.data.policy.partitions_of_host(&h.name);
                view
            })
            .collect();
        // Victims are stopping for these, or just left for them: the room
        // is theirs first.
        let room_freed = self.evicted_for();
        let claims_ms = self
            .room_claims
            .iter()
            .filter_map(|id| Some((*id, self.data.jobs.get(id)?.job.room_freed_ms)))
            .collect();
        let wants_singleton = views.clone().any(|v| v.singleton);
        let deps = spec_rules::DependencyView::with_singleton(self, wants_singleton);
        let dependency = views
            .filter(|view| view.has_dependency)
            .filter_map(|view| {
                let record = self.data.jobs.get(&view.job.id)?;
                Some((view.job.id, deps.status(record).reason()?))
            })
            .collect();
        let running = self
            .running
            .iter()
            .filter_map(|id| self.running_view(*id))
            .collect();
        let snapshot = Snapshot {
            hosts,
            pending: Vec::new(),
            running,
            ..self.policy_snapshot()
        };
        (
            snapshot,
            PendingExtras {
                dependency,
                room_freed,
                claims_ms,
            },
        )
    }

    /// Running job `id` as the pass sees it. Backfill needs to know when
    /// running work frees its room: start + time limit (none without a
    /// limit), or the end of an eviction's grace.
    pub fn running_view(&self, id: JobId) -> Option<RunningJob> {
        let r = self.data.jobs.get(&id)?;
        let alloc = r.job.alloc.as_ref()?;
        let limit_ms = r.job.spec.time_limit_s.saturating_mul(1000);
        let mut end_ms = (limit_ms > 0).then(|| alloc.start_ms.saturating_add(limit_ms));
        // An evicted job is gone once its grace is over (then its
        // agent kills it): backfill may count on that.
        if let Some(mark) = &r.job.evicted {
            let gone_ms = mark.at_ms.saturating_add(mark.grace_s.saturating_mul(1000));
            end_ms = Some(end_ms.map_or(gone_ms, |e| e.min(gone_ms)));
        }
        Some(RunningJob {
            id: r.job.id,
            hosts: alloc.hosts().map(str::to_string).collect(),
            per_host: alloc.resources,
            end_ms,
            start_ms: alloc.start_ms,
            user: r.job.spec.user.clone(),
            account: r.job.spec.account.clone(),
            qos: r.job.spec.qos.clone(),
            partition: alloc.partition.clone(),
            array: array::task_of(&r.job.spec),
            submit_ms: r.job.submit_ms,
            nice: r.job.spec.nice,
            preemptible: r.job.spec.preemptible,
            alloc_id: alloc.alloc_id,
            evicted_for: r.job.evicted.as_ref().map(|m| m.for_job),
            borrowed: r.job.borrowed,
            reclaims: r.job.reclaims,
        })
    }

    /// Applies one command. Deterministic: same state and command, same
    /// result, on every node.
    pub fn apply(&mut self, command: &Command, dirty: &mut Dirty) -> Response {
        let response = self.apply_command(command, dirty);
        // Every job changed since the store last persisted (at least this
        // command's) loses its pending view: a few hundred at most, the
        // size of an apply batch.
        self.pending_views
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .forget(&dirty.jobs);
        response
    }

    fn apply_command(&mut self, command: &Command, dirty: &mut Dirty) -> Response {
        // A submit adds its jobs to the counts; a batch's commands decide
        // one by one; a start report changes no count. Anything else may
        // end, start, move or re-policy a job: the counts are rebuilt.
        if !matches!(
            command,
            Command::SubmitJob { .. } | Command::Batch { .. } | Command::JobStarted { .. }
        ) {
            self.submit_counts = None;
        }
        match command {
            Command::SubmitJob {
                request_id,
                spec,
                now_ms,
            } => self.submit(request_id, spec, *now_ms, dirty),
            Command::CancelJob { job_id, now_ms } => self.cancel(*job_id, *now_ms, dirty),
            Command::CancelArray {
                array_job_id,
                now_ms,
            } => self.cancel_array(*array_job_id, *now_ms, dirty),
            Command::RegisterHost {
                name,
                inventory,
                agent_restarted,
                running_allocs,
                now_ms,
                drain_reason,
                step_addr,
            } => {
                let response = self.register_host(
                    name,
                    inventory,
                    HostExtras {
                        drain_reason,
                        step_addr,
                    },
                    *now_ms,
                    dirty,
                );
                if *agent_restarted && response == Response::HostRegistered {
                    self.end_lost_allocations(name, running_allocs, *now_ms, dirty);
                }
                response
            }
            Command::ApplyPlan {
                snapshot_index,
                now_ms,
                starts,
                gang_starts,
                evictions,
                borrowed,
            } => {
                let planned: Vec<PlannedStart<'_>> = starts
                    .iter()
                    .map(PlannedStart::of)
                    .chain(gang_starts.iter().map(PlannedStart::of_gang))
                    .collect();
                self.apply_plan(
                    *snapshot_index,
                    &planned,
                    borrowed,
                    evictions,
                    *now_ms,
                    dirty,
                )
            }
            Command::CreateReservation {
                reservation,
                now_ms,
            } => self.create_reservation(reservation, *now_ms),
            Command::DeleteReservation { name, .. } => self.delete_reservation(name),
            Command::TimeLimitReached {
                allocations,
                now_ms,
            } => self.time_limits_reached(allocations, *now_ms, dirty),
            Command::HostsSilent {
                hosts,
                timeout_ms,
                now_ms,
            } => {
                let mut ended = 0;
                for host in hosts {
                    let why = format!("{host} sent no heartbeat for {timeout_ms} ms");
                    ended += self.fail_allocations(HostMatch::Any(host), &[], &why, *now_ms, dirty);
                }
                Response::HostsFailed { jobs_ended: ended }
            }
            Command::JobStarted {
                job_id,
                alloc_id,
                host,
                pid,
                now_ms,
            } => self.job_started(*job_id, *alloc_id, host, *pid, *now_ms, dirty),
            Command::StepReported {
                job_id,
                alloc_id,
                host,
                report,
                now_ms,
            } => self.report_step(*job_id, *alloc_id, host, report, *now_ms, dirty),
            Command::SetPolicy { change, now_ms } => self.set_policy(change, *now_ms, dirty),
            Command::ControlJob {
                job_id,
                action,
                now_ms,
            } => self.control(*job_id, *action, *now_ms, dirty),
            Command::UpdateJob {
                job_id,
                update,
                admin,
                now_ms,
                whole_array,
            } => self.update_job(*job_id, update, *admin, *whole_array, *now_ms, dirty),
            Command::JobExited {
                job_id,
                alloc_id,
                host,
                exit_code,
                signal,
                launch_error,
                now_ms,
            } => self.job_exited(
                *job_id,
                *alloc_id,
                host,
                (*exit_code, *signal),
                launch_error,
                *now_ms,
                dirty,
            ),
            // Each command as if it were its own entry; a nested batch is
            // refused (the leader never makes one), so apply stays shallow.
            Command::Batch { commands } => Response::Batch {
                responses: commands
                    .iter()
                    .map(|command| match command {
                        Command::Batch { .. } => Response::Rejected {
                            reason: "a batch may not contain a batch".into(),
                        },
                        command => self.apply_command(command, dirty),
                    })
                    .collect(),
            },
        }
    }

    fn submit(
        &mut self,
        request_id: &str,
        spec: &JobSpec,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        if let Some(job_id) = self.data.request_ids.get(request_id) {
            return Response::Submitted {
                job_id: *job_id,
                duplicate: true,
            };
        }
        if let Err(reason) =
            validate_submit(request_id, spec).and_then(|()| self.check_dependency_jobs(spec))
        {
            return Response::Rejected { reason };
        }
        self.prepare_submit_counts();
        let spec = match self.resolve_submit(spec) {
            Ok(resolved) => resolved,
            Err(reason) => return Response::Rejected { reason },
        };
        // With the account resolved: the reservation must admit it.
        if let Err(reason) = self.check_reservation(&spec, now_ms) {
            return Response::Rejected { reason };
        }
        let first_id = self.data.counters.next_job_id;
        let tasks = match array::task_specs(&spec, first_id) {
            Ok(tasks) => tasks,
            Err(reason) => return Response::Rejected { reason },
        };
        for spec in &tasks {
            self.make_job(spec, now_ms, dirty);
        }
        self.count_submitted(&tasks);
        self.remember_request_id(request_id, first_id, dirty);
        Response::Submitted {
            job_id: first_id,
            duplicate: false,
        }
    }

    /// One new pending job with the next id (a submit makes one per array
    /// task).
    fn make_job(&mut self, spec: &JobSpec, now_ms: u64, dirty: &mut Dirty) {
        let job_id = self.data.counters.next_job_id;
        self.data.counters.next_job_id += 1;
        let mut record = JobRecord::new_pending(job_id, spec.clone(), now_ms);
        let held = if spec.hold { " (held)" } else { "" };
        let alts = if spec.alternatives.is_empty() {
            String::new()
        } else {
            format!(" ({} alternative resource sets)", spec.alternatives.len())
        };
        let task = if spec.array_job_id != 0 {
            format!(" (array task {}_{})", spec.array_job_id, spec.array_task_id)
        } else {
            String::new()
        };
        record.push_event(
            now_ms,
            "submitted",
            format!(
                "Submitted by {} : {} cpus, {} MiB{alts}{held}{task}",
                spec.user,
                spec.per_host().cpus,
                spec.mem_mb
            ),
        );
        if !self.data.policy.is_empty() {
            let text = self.priority_set_text(spec);
            record.push_event(now_ms, "priority", text);
        }
        self.data.jobs.insert(job_id, record);
        self.pending.insert(job_id);
        dirty.jobs.insert(job_id);
    }

    fn remember_request_id(&mut self, request_id: &str, job_id: JobId, dirty: &mut Dirty) {
        self.data.request_ids.insert(request_id.to_string(), job_id);
        self.request_id_of_job
            .insert(job_id, request_id.to_string());
        dirty.request_ids_put.insert(request_id.to_string(), job_id);
        dirty.request_ids_deleted.remove(request_id);
        // Forget the request ids of jobs that fell out of the window.
        let oldest_kept = job_id.saturating_sub(REQUEST_IDS_RETAINED_JOBS);
        while let Some((&old_job, _)) = self.request_id_of_job.first_key_value() {
            if old_job > oldest_kept {
                break;
            }
            if let Some(old_request) = self.request_id_of_job.remove(&old_job) {
                self.data.request_ids.remove(&old_request);
                dirty.request_ids_put.remove(&old_request);
                dirty.request_ids_deleted.insert(old_request);
            }
        }
    }

    fn cancel(&mut self, job_id: JobId, now_ms: u64, dirty: &mut Dirty) -> Response {
        let Some(record) = self.data.jobs.get_mut(&job_id) else {
            return Response::Rejected {
                reason: format!("job {job_id} does not exist"),
            };
        };
        let previous_state = record.job.state;
        match previous_state {
            JobState::Pending => {
                record.job.state = JobState::Cancelled;
                record.job.end_ms = now_ms;
                record.push_event(now_ms, "cancelled", "Cancelled while pending".into());
                self.pending.remove(&job_id);
            }
            JobState::Running => {
                if !record.job.cancel_requested {
                    record.job.cancel_requested = true;
                    record.push_event(
                        now_ms,
                        "cancel-requested",
                        "Cancel requested; stopping".into(),
                    );
                }
            }
            done => {
                return Response::Rejected {
                    reason: format!("job {job_id} has already ended ({})", done.slurm_name()),
                }
            }
        }
        dirty.jobs.insert(job_id);
        Response::Cancelled { previous_state }
    }

    fn register_host(
        &mut self,
        name: &str,
        inventory: &Inventory,
        extras: HostExtras<'_>,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let HostExtras {
            drain_reason,
            step_addr,
        } = extras;
        if name.is_empty() {
            return Response::Rejected {
                reason: "host name is empty".into(),
            };
        }
        if drain_reason.len() > HOST_DRAIN_REASON_BYTES_MAX {
            return Response::Rejected {
                reason: format!(
                    "drain reason of {} bytes is longer than {HOST_DRAIN_REASON_BYTES_MAX}",
                    drain_reason.len()
                ),
            };
        }
        if step_addr.len() > HOST_STEP_ADDR_BYTES_MAX {
            return Response::Rejected {
                reason: format!(
                    "step address of {} bytes is longer than {HOST_STEP_ADDR_BYTES_MAX}",
                    step_addr.len()
                ),
            };
        }
        if let Err(reason) = spec_rules::validate_host_features(&inventory.features) {
            return Response::Rejected { reason };
        }
        let allocated = self
            .data
            .hosts
            .get(name)
            .map(|h| h.allocated)
            .unwrap_or_default();
        self.data.hosts.insert(
            name.to_string(),
            HostRecord {
                name: name.to_string(),
                inventory: inventory.clone(),
                registered_ms: now_ms,
                drain_reason: drain_reason.to_string(),
                step_addr: step_addr.to_string(),
                allocated,
            },
        );
        dirty.hosts.insert(name.to_string());
        Response::HostRegistered
    }

    /// Ends as NODE_FAIL every job running on `host` whose allocation its
    /// restarted agent does not run: the process is gone, and launching it
    /// again could run the job twice.
    fn end_lost_allocations(
        &mut self,
        host: &str,
        running_allocs: &[u64],
        now_ms: u64,
        dirty: &mut Dirty,
    ) {
        let why = format!("the agent on {host} restarted and no longer runs this allocation");
        // Only the batch host runs anything: a gang member's agent has
        // nothing of the job to lose, and neither has the batch host's of
        // an interactive allocation.
        let mut keep = running_allocs.to_vec();
        keep.extend(
            self.running
                .iter()
                .filter_map(|id| self.data.jobs.get(id))
                .filter(|r| r.job.spec.interactive)
                .filter_map(|r| r.job.alloc.as_ref().map(|a| a.alloc_id)),
        );
        self.fail_allocations(HostMatch::Batch(host), &keep, &why, now_ms, dirty);
    }

    /// Ends as NODE_FAIL every job running on `host` except allocations in
    /// `keep`, saying `why`. Returns how many ended. They are not requeued:
    /// a host that merely lost its network may still run them, and its
    /// agent stops them when it reconnects (they leave its assignment set).
    fn fail_allocations(
        &mut self,
        host: HostMatch<'_>,
        keep: &[u64],
        why: &str,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> u32 {
        let lost: Vec<JobId> = self
            .running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter(|r| {
                r.job
                    .alloc
                    .as_ref()
                    .is_some_and(|a| host.matches(a) && !keep.contains(&a.alloc_id))
            })
            .map(|r| r.job.id)
            .collect();
        if !lost.is_empty() {
            // Their runs are charged to the moment they end.
            self.accrue_usage(now_ms);
        }
        let mut ended = 0u32;
        for job_id in lost {
            let Some(record) = self.data.jobs.get_mut(&job_id) else {
                continue;
            };
            ended += 1;
            // A job that allows it goes back to the queue (Slurm's
            // --requeue), counted against the automatic requeue bound.
            if record.job.spec.requeue && !record.job.cancel_requested {
                self.back_to_queue(
                    job_id,
                    &format!("NODE_FAIL: {why}"),
                    true,
                    true,
                    now_ms,
                    dirty,
                );
                continue;
            }
            record.job.state = JobState::NodeFail;
            record.job.end_ms = now_ms;
            record.push_event(now_ms, "node-fail", format!("NODE_FAIL: {why}"));
            self.release_allocation(job_id, now_ms, dirty);
        }
        ended
    }

    /// A running job has reached its final state: its allocation's
    /// resources go back to its host and it leaves the running index.
    /// Ends the job's run: its host gets the room back, and a borrowed
    /// run is charged to usage now (unless a reclaim ended it).
    fn release_allocation(&mut self, job_id: JobId, now_ms: u64, dirty: &mut Dirty) {
        if self.running.contains(&job_id) {
            self.charge_borrowed_run(job_id, now_ms);
        }
        self.running.remove(&job_id);
        dirty.jobs.insert(job_id);
        let Some(alloc) = self
            .data
            .jobs
            .get(&job_id)
            .and_then(|r| r.job.alloc.as_ref())
        else {
            return;
        };
        for name in alloc.hosts() {
            if let Some(h) = self.data.hosts.get_mut(name) {
                h.allocated = h.allocated.saturating_sub(alloc.resources);
                dirty.hosts.insert(name.to_string());
            }
        }
    }

    /// Hosts that run allocations, for the leader to check against its
    /// heartbeat deadlines.
    pub fn hosts_with_allocations(&self) -> BTreeSet<String> {
        self.running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter_map(|r| r.job.alloc.as_ref())
            .flat_map(|a| a.hosts().map(str::to_string))
            .collect()
    }

    /// The SIGTERM-to-SIGKILL grace the agents get for stopping job `r`:
    /// its QOS's GraceTime, else `default_grace_s` (`[agents]
    /// stop_grace_s`).
    pub fn stop_grace_s(&self, r: &JobRecord, default_grace_s: u64) -> u64 {
        // The stored spec names its resolved QOS (set at submit).
        self.data
            .policy
            .qos
            .get(&r.job.spec.qos)
            .and_then(|q| q.grace_time_s)
            .unwrap_or(default_grace_s)
    }

    /// Running jobs past their time limit at `now_ms` that are not being
    /// stopped yet, as (job, allocation), at most `max` of them. The leader
    /// proposes these as one `TimeLimitReached`.
    pub fn time_limits_expired(&self, now_ms: u64, max: usize) -> Vec<(JobId, u64)> {
        self.running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter(|r| {
                !r.job.cancel_requested && !r.job.time_limit_reached && r.job.evicted.is_none()
            })
            .filter_map(|r| {
                let alloc = r.job.alloc.as_ref()?;
                past_limit(&r.job.spec, alloc.start_ms, now_ms)
                    .then_some((r.job.id, alloc.alloc_id))
            })
            .take(max)
            .collect()
    }

    fn time_limits_reached(
        &mut self,
        allocations: &[(JobId, u64)],
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let mut stopping = 0u32;
        for (job_id, alloc_id) in allocations {
            let Some(record) = self.data.jobs.get_mut(job_id) else {
                continue;
            };
            let Some(alloc) = record.job.alloc.as_ref() else {
                continue;
            };
            // Re-checked where it lands: the same allocation, still running,
            // really past its limit by the stamped time.
            if alloc.alloc_id != *alloc_id
                || record.job.state != JobState::Running
                || record.job.cancel_requested
                || record.job.time_limit_reached
                || record.job.evicted.is_some()
                || !past_limit(&record.job.spec, alloc.start_ms, now_ms)
            {
                continue;
            }
            record.job.time_limit_reached = true;
            let limit_s = record.job.spec.time_limit_s;
            record.push_event(
                now_ms,
                "time-limit",
                format!("Time limit of {limit_s} s reached; stopping"),
            );
            dirty.jobs.insert(*job_id);
            stopping += 1;
        }
        Response::TimeLimitsEnforced { stopping }
    }

    fn apply_plan(
        &mut self,
        snapshot_index: u64,
        starts: &[PlannedStart<'_>],
        borrowed: &[JobId],
        evictions: &[Eviction],
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let mut started = 0u32;
        let mut dropped = 0u32;
        self.accrue_usage(now_ms);
        self.expire_room_claims(now_ms, dirty);
        let mut limits = self.limit_recheck(now_ms);
        // Begin times and dependencies, read before any of the plan starts:
        // a start never satisfies another job's dependency, and a
        // singleton peer pending ahead still blocks in the pass's snapshot.
        let mut array_running = self.array_running(starts.iter().map(|p| p.job_id));
        let not_yet: BTreeSet<JobId> = {
            let view = spec_rules::DependencyView::new(self);
            starts
                .iter()
                .filter(|p| {
                    self.data
                        .jobs
                        .get(&p.job_id)
                        .is_some_and(|r| self.start_blocker(&view, r, now_ms).is_some())
                })
                .map(|p| p.job_id)
                .collect()
        };
        // A loan is charged to no quota, so it is judged against what runs
        // before any of the plan's starts: the pass placed it at its turn in
        // the queue, and starts the plan lists before it (single hosts come
        // before gangs here) may have come after it there.
        let loans_allowed: BTreeSet<JobId> = starts
            .iter()
            .filter(|p| borrowed.contains(&p.job_id))
            .filter(|p| self.limits_allow(&mut limits, p, true))
            .map(|p| p.job_id)
            .collect();
        for placement in starts {
            if not_yet.contains(&placement.job_id) {
                dropped += 1;
                continue;
            }
            // The array's %max, counting the plan's earlier starts.
            let limit = self
                .data
                .jobs
                .get(&placement.job_id)
                .and_then(|r| array::task_of(&r.job.spec))
                .filter(|a| a.max_running > 0);
            if let Some(a) = limit {
                if array_running.get(&a.array_id).copied().unwrap_or(0) >= a.max_running {
                    dropped += 1;
                    continue;
                }
            }
            let on_loan = borrowed.contains(&placement.job_id);
            let allowed = if on_loan {
                loans_allowed.contains(&placement.job_id)
            } else {
                self.limits_allow(&mut limits, placement, false)
            };
            if !allowed {
                dropped += 1;
                continue;
            }
            if self.recheck_and_start(placement, on_loan, now_ms, dirty) {
                if let Some(a) = limit {
                    *array_running.entry(a.array_id).or_default() += 1;
                }
                started += 1;
            } else {
                dropped += 1;
            }
        }
        if dropped > 0 {
            tracing::debug!(
                snapshot_index,
                dropped,
                "plan placements no longer valid were dropped"
            );
        }
        // After the starts, as the pass decided them: victims keep their
        // room until their agents report them gone.
        let evicted = self.apply_evictions(evictions, now_ms, dirty);
        Response::PlanApplied {
            started,
            dropped,
            evicted,
        }
    }

    /// Invariant 3: the placement is checked again against the state it
    /// lands on, with the same `fits` the pass used, on every host of it:
    /// a gang starts on all its hosts or not at all.
    fn recheck_and_start(
        &mut self,
        placement: &PlannedStart<'_>,
        borrowed: bool,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> bool {
        let Some(record) = self.data.jobs.get(&placement.job_id) else {
            return false;
        };
        if record.job.state != JobState::Pending || record.job.held() {
            return false;
        }
        let spec = &record.job.spec;
        // The resource path the plan chose: an alternative's request, or
        // the job's own; a path the job does not have drops the placement.
        let Some(shape) = spec.shape_on(placement.path) else {
            return false;
        };
        // As many distinct hosts as the path asks for, the batch host first.
        let hosts = placement.hosts;
        let distinct: BTreeSet<&str> = hosts.iter().map(String::as_str).collect();
        if hosts.len() != shape.hosts_needed() || distinct.len() != hosts.len() {
            return false;
        }
        let mut devices: Vec<Vec<u32>> = Vec::with_capacity(hosts.len());
        for name in hosts {
            match self.host_takes(placement, spec, &shape, name, now_ms) {
                Some(picked) => devices.push(picked),
                None => return false,
            }
        }
        // Every host was found above: none can be missing here, and a
        // return halfway would leave room taken on the hosts before it.
        for name in hosts {
            if let Some(host) = self.data.hosts.get_mut(name) {
                host.allocated = host.allocated.saturating_add(placement.resources);
                debug_assert!(host.allocated.within(host.inventory.resources()));
            }
        }
        let mut devices = devices.into_iter();
        let gpu_indices = devices.next().unwrap_or_default();
        let gang = hosts[1..]
            .iter()
            .zip(devices)
            .map(|(host, gpu_indices)| GangMember {
                host: host.clone(),
                gpu_indices,
            })
            .collect();
        let batch_host = hosts[0].clone();
        let alloc_id = self.data.counters.next_alloc_id;
        self.data.counters.next_alloc_id += 1;
        let Some(record) = self.data.jobs.get_mut(&placement.job_id) else {
            return false;
        };
        record.job.state = JobState::Running;
        record.job.borrowed = borrowed;
        record.job.evicted = None;
        record.job.room_freed_ms = 0;
        record.job.requeued_for = 0;
        self.room_claims.remove(&placement.job_id);
        record.job.alloc = Some(Allocation {
            alloc_id,
            host: batch_host,
            resources: placement.resources,
            start_ms: now_ms,
            partition: placement.partition.to_string(),
            gpu_indices,
            alternative: if record.job.spec.alternatives.is_empty() {
                0
            } else {
                u32::try_from(placement.path + 1).unwrap_or(u32::MAX)
            },
            gang,
        });
        let loan = if borrowed {
            " on borrowed capacity (idle-fill; reclaimable)"
        } else {
            ""
        };
        record.push_event(
            now_ms,
            "allocated",
            format!(
                "Allocated on {} (allocation {alloc_id}){loan}",
                hosts.join(",")
            ),
        );
        let sets = &record.job.spec.alternatives;
        if let Some(set) = sets.get(placement.path) {
            let mut text = format!(
                "Started on alternative {} of {} ({})",
                placement.path + 1,
                sets.len(),
                set_text(set)
            );
            let released: Vec<String> = placement
                .released
                .iter()
                .filter(|&&k| k < sets.len())
                .map(|k| (k + 1).to_string())
                .collect();
            if !released.is_empty() {
                text.push_str(&format!(
                    "; multi-path reservation released on alternative {}",
                    released.join(", ")
                ));
            }
            record.push_event(now_ms, "alternative", text);
        }
        self.pending.remove(&placement.job_id);
        self.running.insert(placement.job_id);
        dirty.jobs.insert(placement.job_id);
        dirty.hosts.extend(hosts.iter().cloned());
        true
    }

    /// The GPU devices the placement's job would get on `name` if the host
    /// can take its share of `shape` now: not closed to it by an admin
    /// reservation, in the placement's partition, of the path's kind (GPU
    /// model, emulator kind and group, features), asked exactly what the
    /// job takes there (its request, or the whole host when exclusive),
    /// and with the room. `None` otherwise.
    fn host_takes(
        &self,
        placement: &PlannedStart<'_>,
        spec: &JobSpec,
        shape: &berth_scheduler::pass::Shape,
        name: &str,
        now_ms: u64,
    ) -> Option<Vec<u32>> {
        let resources = placement.resources;
        if let Some(why) = self.reservation_blocks(spec, name, now_ms) {
            tracing::debug!(job = placement.job_id, %why, "placement dropped");
            return None;
        }
        let host = self.data.hosts.get(name)?;
        // Liveness is leader soft state; the re-check is about capacity and
        // a drain its agent asked for (the view says `Drain` then).
        let mut view = host.view(HostState::Up);
        let partition = (!placement.partition.is_empty()).then_some(placement.partition);
        if partition.is_some() {
            view.partitions = self.data.policy.partitions_of_host(name);
        }
        berth_scheduler::fit::eligible(&view, shape, partition).ok()?;
        let need = berth_scheduler::pass::need_on(&view, shape.per_host, spec.exclusive);
        if need != Some(resources) {
            return None;
        }
        fits(&view, resources).ok()?;
        if resources.gpus == 0 {
            return Some(Vec::new());
        }
        let in_use: Vec<u32> = self
            .running
            .iter()
            .filter_map(|id| self.data.jobs.get(id)?.job.alloc.as_ref())
            .flat_map(|a| a.gpu_indices_on(name).iter().copied())
            .collect();
        berth_scheduler::gres::pick_devices(host.inventory.gpus, &in_use, resources.gpus)
    }

    /// The record of `job_id` if `alloc_id` on `host` is its current
    /// allocation.
    fn current_alloc_mut(
        &mut self,
        job_id: JobId,
        alloc_id: u64,
        host: &str,
    ) -> Option<&mut JobRecord> {
        self.data.jobs.get_mut(&job_id).filter(|r| {
            r.job
                .alloc
                .as_ref()
                .is_some_and(|a| a.alloc_id == alloc_id && a.host == host)
        })
    }

    fn job_started(
        &mut self,
        job_id: JobId,
        alloc_id: u64,
        host: &str,
        pid: i32,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let Some(record) = self.current_alloc_mut(job_id, alloc_id, host) else {
            return Response::Report { accepted: false };
        };
        if record.job.state == JobState::Running {
            record.push_event(now_ms, "started", format!("Started on {host} (pid {pid})"));
            dirty.jobs.insert(job_id);
        }
        Response::Report { accepted: true }
    }

    #[allow(clippy::too_many_arguments)]
    fn job_exited(
        &mut self,
        job_id: JobId,
        alloc_id: u64,
        host: &str,
        (exit_code, signal): (i32, i32),
        launch_error: &str,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let Some(record) = self.current_alloc_mut(job_id, alloc_id, host) else {
            return Response::Report { accepted: false };
        };
        if record.job.state != JobState::Running {
            // Already recorded: a retried report.
            return Response::Report { accepted: true };
        }
        // The run is charged to the moment it ends, as every other run is
        // to now: usage accrues otherwise only when a plan is applied, and
        // a job alone on an idle cluster would never be charged.
        self.accrue_usage(now_ms);
        let Some(record) = self.data.jobs.get_mut(&job_id) else {
            return Response::Report { accepted: false };
        };
        if let Some(mark) = record.job.evicted.clone() {
            self.evicted_exit(job_id, &mark, host, now_ms, dirty);
            return Response::Report { accepted: true };
        }
        if record.job.requeue_requested && !record.job.cancel_requested {
            let how = format!("stopped on {host} for a requeue");
            self.back_to_queue(job_id, &how, false, true, now_ms, dirty);
            return Response::Report { accepted: true };
        }
        let final_state = if record.job.cancel_requested {
            JobState::Cancelled
        } else if record.job.time_limit_reached {
            JobState::Timeout
        } else if exit_code == 0 && signal == 0 && launch_error.is_empty() {
            JobState::Completed
        } else {
            JobState::Failed
        };
        record.job.state = final_state;
        record.job.end_ms = now_ms;
        record.job.exit_code = exit_code;
        record.job.exit_signal = signal;
        let how = if !launch_error.is_empty() {
            format!("could not start: {launch_error}")
        } else if signal != 0 {
            format!("killed by signal {signal}")
        } else {
            format!("exit code {exit_code}")
        };
        record.push_event(
            now_ms,
            "ended",
            format!("{} on {host}: {how}", final_state.slurm_name()),
        );
        self.release_allocation(job_id, now_ms, dirty);
        Response::Report { accepted: true }
    }
}

/// One start of a plan, on one host or on a gang's hosts (the batch host
/// first): what `apply` re-checks either way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlannedStart<'a> {
    pub job_id: JobId,
    pub hosts: &'a [String],
    /// What it takes on each host.
    pub resources: Resources,
    pub partition: &'a str,
    pub path: usize,
    /// Alternatives whose multi-path reservation the start lets go.
    pub released: &'a [usize],
}

impl<'a> PlannedStart<'a> {
    fn of(p: &'a Placement) -> PlannedStart<'a> {
        PlannedStart {
            job_id: p.job_id,
            hosts: std::slice::from_ref(&p.host),
            resources: p.resources,
            partition: &p.partition,
            path: p.path,
            released: &p.released,
        }
    }

    fn of_gang(g: &'a GangPlacement) -> PlannedStart<'a> {
        PlannedStart {
            job_id: g.job_id,
            hosts: &g.hosts,
            resources: g.resources,
            partition: &g.partition,
            path: g.path,
            released: &g.released,
        }
    }
}

/// Which allocations a host-wide failure ends.
#[derive(Debug, Clone, Copy)]
enum HostMatch<'a> {
    /// Those whose batch host it is (where the job's processes run).
    Batch(&'a str),
    /// Every allocation holding room on it: a gang fails with any member.
    Any(&'a str),
}

impl HostMatch<'_> {
    fn matches(self, alloc: &Allocation) -> bool {
        match self {
            HostMatch::Batch(host) => alloc.host == host,
            HostMatch::Any(host) => alloc.holds(host),
        }
    }
}

/// True when a job started at `start_ms` with `spec`'s limit is past it at
/// `now_ms`. A limit of 0 means none.
fn past_limit(spec: &JobSpec, start_ms: u64, now_ms: u64) -> bool {
    spec.time_limit_s > 0
        && now_ms >= start_ms.saturating_add(spec.time_limit_s.saturating_mul(1000))
}

/// Checks a submit before it makes a job. Deterministic, like all of apply:
/// the leader runs the same checks before proposing, so a rejection here is
/// a second line of defence.
pub fn validate_submit(request_id: &str, spec: &JobSpec) -> Result<(), String> {
    if request_id.is_empty() {
        return Err("request_id is required (any unique string per submit)".into());
    }
    if request_id.len() > REQUEST_ID_BYTES_MAX {
        return Err(format!(
            "request_id is longer than {REQUEST_ID_BYTES_MAX} bytes"
        ));
    }
    if spec.command.trim().is_empty() {
        return Err("the job has no command".into());
    }
    if spec.interactive && !spec.array.is_empty() {
        return Err("an interactive allocation cannot be a job array".into());
    }
    if spec.command.len() > COMMAND_BYTES_MAX {
        return Err(format!(
            "the job's command is longer than {COMMAND_BYTES_MAX} bytes"
        ));
    }
    if spec.nodes as usize > NODES_PER_JOB_MAX {
        return Err(format!(
            "the job asks for {} nodes; at most {NODES_PER_JOB_MAX} are allowed",
            spec.nodes
        ));
    }
    spec.shape()?;
    berth_scheduler::signal::validate_warn_signal(
        spec.warn_signal,
        spec.warn_signal_before_s,
        spec.warn_signal_batch_only,
    )?;
    validate_alternatives(spec)?;
    spec_rules::validate(spec)?;
    array::validate(spec)?;
    Ok(())
}

/// The most hosts one job may span (a bound on the allocation a plan
/// re-checks and a record carries).
pub const NODES_PER_JOB_MAX: usize = 4096;

/// The most alternative resource sets one job may carry (emulator jobs
/// carry ten or more; the bound keeps a pass's work per job small).
pub const ALTERNATIVES_MAX: usize = 32;

/// A submit's alternative resource sets: bounded in number and in hosts,
/// a partition of its own one name (whether it exists is checked against
/// the policy with the job's own partitions), and each `gres` parsed by
/// the job's own parser.
fn validate_alternatives(spec: &JobSpec) -> Result<(), String> {
    if spec.alternatives.len() > ALTERNATIVES_MAX {
        return Err(format!(
            "the job has {} alternative resource sets; at most {ALTERNATIVES_MAX} are allowed",
            spec.alternatives.len()
        ));
    }
    for (i, set) in spec.alternatives.iter().enumerate() {
        let n = i + 1;
        if set.nodes as usize > NODES_PER_JOB_MAX {
            return Err(format!(
                "alternative {n}: asks for {} nodes; at most {NODES_PER_JOB_MAX} are allowed",
                set.nodes
            ));
        }
        if set.partition.chars().any(|c| c.is_whitespace() || c == ',') {
            return Err(format!(
                "alternative {n}: partition {:?} must be one name, without spaces or commas",
                set.partition
            ));
        }
    }
    spec.alternative_shapes()?;
    Ok(())
}

/// How an event names a resource set: `cpus=8,mem=32768M,gres=emu:zebu:2`.
fn set_text(set: &berth_scheduler::ResourceSet) -> String {
    let mut text = format!("cpus={},mem={}M", set.cpus.max(1), set.mem_mb);
    if set.nodes > 1 {
        text.push_str(&format!(",nodes={}", set.nodes));
    }
    if !set.gres.is_empty() {
        text.push_str(&format!(",gres={}", set.gres.join(",")));
    }
    text
}

#[cfg(test)]
mod alt_tests;
#[cfg(test)]
mod array_tests;
#[cfg(test)]
mod evict_tests;
#[cfg(test)]
mod gang_tests;
#[cfg(test)]
mod record_json_tests;
#[cfg(test)]
mod spec_rules_tests;
#[cfg(test)]
mod submit_limit_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod update_tests;
