//! One scheduling pass: `schedule(&Snapshot, &Policy, now_ms) -> Plan`.
//!
//! Jobs are considered in queue order (the order of `Snapshot::pending`,
//! which is submit order). A job starts when enough hosts have its
//! resources free now; a multi-host job is a gang and starts on all its
//! hosts at once or not at all; an exclusive job takes whole hosts.
//!
//! With `backfill` on (EASY backfill) the first `bf_reservations` jobs that
//! cannot start get a reservation: the earliest time enough hosts will be
//! free, computed from an availability profile of every host (running
//! jobs free their room at start + time limit). Jobs behind them start now
//! only if they fit around every reservation: they end before it, or they
//! use room it does not need. A job without a time limit cannot be known to
//! end, so it only gets room no reservation needs. Other blocked jobs wait
//! with `Priority`.
//!
//! With `backfill` off the pass is strict FIFO: the first job that cannot
//! start blocks every job behind it. In both, a job no set of hosts could
//! ever hold does not block the queue (`ReqNodeNotAvail`), nor does a held
//! one (`JobHeldUser`).
//!
//! Every host a job is placed on has passed [`fits`], the check `apply`
//! repeats (invariant 3).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::assoc::{Account, UserRecord};
use crate::catalog::Catalog;
use crate::evict::Eviction;
use crate::fxhash::FxMap;
use crate::idlefill::{self, IdleFill, LendCtx};
use crate::layout::HostLayout;
use crate::limits::{self, Charge, LimitHit, LimitRequest, Tally};
use crate::model::{Host, JobId, Resources};
use crate::multipath::{self, MultiPathCounters, MultiPathReservation, PathReservation};
use crate::partition::Partition;
use crate::pool::{Classes, Pool};
use crate::preempt::{PreemptCounters, PreemptPolicy, Preemptor};
use crate::priority;
use crate::qos::{Qos, TresKind};
use crate::reason::{LimitKind, Reason};
use crate::reclaim::{self, Opportunistic};
use crate::resv::{self, AdminReservation};
use crate::usage::Usage;

/// One resource path of a job: how many hosts, what each must provide, and
/// which hosts qualify at all. A job has one, or several OR'd alternatives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Shape {
    /// Hosts it needs at once (a gang); 0 counts as 1.
    pub nodes: u32,
    /// What each of its hosts must provide.
    pub per_host: Resources,
    /// Whole hosts: nothing else runs beside it.
    pub exclusive: bool,
    /// GPU model a host must have ("" = any).
    pub gpu_type: String,
    /// Emulator kind and group a host must have ("" = any); only asked when
    /// `per_host.emu > 0`.
    pub emu_kind: String,
    pub emu_group: String,
    /// Features every host must have (`--constraint`).
    pub features: Vec<String>,
}

impl Shape {
    /// One host with `per_host`, shared, any kind.
    pub fn one(per_host: Resources) -> Shape {
        Shape {
            nodes: 1,
            per_host,
            ..Shape::default()
        }
    }

    pub fn hosts_needed(&self) -> usize {
        self.nodes.max(1) as usize
    }
}

/// A task of a job array: the array's id and how many of its tasks may run
/// at once (`%max`; 0 = no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArrayTask {
    pub array_id: JobId,
    pub max_running: u32,
}

impl PendingJob {
    /// `jobs` shared, as a [`Snapshot`] holds them.
    pub fn queue(jobs: impl IntoIterator<Item = PendingJob>) -> Vec<Arc<PendingJob>> {
        jobs.into_iter().map(Arc::new).collect()
    }
}

/// A pending job as the pass sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PendingJob {
    pub id: JobId,
    pub shape: Shape,
    /// OR'd resource paths; when not empty they replace `shape` (index 0 is
    /// the first listed).
    pub alternatives: Vec<Shape>,
    /// The partition each alternative runs in, by index ("" or missing:
    /// the job's `partitions`). An alternative naming one runs there
    /// alone, even where the job's own list does not name it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub path_partitions: Vec<String>,
    pub held: bool,
    /// 0 = none (the partition's default applies before the snapshot).
    pub time_limit_s: u64,
    pub submit_ms: u64,
    pub user: String,
    /// "" = the user's default account.
    pub account: String,
    /// "" = the account's default QOS.
    pub qos: String,
    /// Partitions it may run in, first that can run it wins; empty = the
    /// default partition.
    pub partitions: Vec<String>,
    /// Slurm's nice: positive lowers priority; negative raises it within
    /// the account's `max_priority` (checked at submit).
    pub nice: i32,
    /// Not before this time (`--begin`); 0 = now.
    pub begin_ms: u64,
    /// Set by the caller when the job's dependencies hold it
    /// (`Dependency` or `DependencyNeverSatisfied`).
    pub dependency: Option<Reason>,
    pub array: Option<ArrayTask>,
    /// The admin reservation it runs in ("" = none).
    pub reservation: String,
    /// Opted in to being preempted by higher-priority work (the priority
    /// preemption rule; QOS preempt lists need no opt-in).
    pub preemptible: bool,
    /// Jobs were evicted for it and are stopping (or just exited): it is
    /// taken ahead of the queue order, so the room they free goes to it
    /// and not back to them or to anyone else.
    pub room_freed: bool,
    /// Since when it has held a multi-path reservation without starting
    /// (kept by the caller from earlier plans; for `max_reserve_time_s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath_since_ms: Option<u64>,
    /// The alternatives (path indexes) it held room on after the last pass
    /// (kept by the caller, like `multipath_since_ms`): a start lets go of
    /// all but the one it took, and says so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub multipath_held: Vec<usize>,
    /// A priority an administrator fixed (`scontrol update Priority=N`):
    /// the job's total, in place of the multifactor sum; 0 = none.
    #[serde(skip_serializing_if = "u32_is_zero")]
    pub admin_priority: u32,
}

fn u32_is_zero(n: &u32) -> bool {
    *n == 0
}

impl PendingJob {
    /// A single-host, shared job without a time limit.
    pub fn new(id: JobId, request: Resources) -> PendingJob {
        PendingJob {
            id,
            shape: Shape::one(request),
            ..PendingJob::default()
        }
    }

    /// Its resource paths: the alternatives, or its own shape.
    pub fn paths(&self) -> &[Shape] {
        if self.alternatives.is_empty() {
            std::slice::from_ref(&self.shape)
        } else {
            &self.alternatives
        }
    }

    fn duration_ms(&self) -> Option<u64> {
        (self.time_limit_s > 0).then(|| self.time_limit_s.saturating_mul(1000))
    }
}

/// A running job as the pass sees it: where it holds room and until when,
/// and whose it is (for limits and fair share).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunningJob {
    pub id: JobId,
    pub hosts: Vec<String>,
    /// What it holds on each of its hosts.
    pub per_host: Resources,
    /// Start + time limit; `None` when it has no limit (never known to end).
    pub end_ms: Option<u64>,
    pub start_ms: u64,
    pub user: String,
    pub account: String,
    pub qos: String,
    pub partition: String,
    pub array: Option<ArrayTask>,
    /// Submit time and nice, for its priority as a preemption candidate
    /// (its age is frozen at its start).
    pub submit_ms: u64,
    pub nice: i32,
    /// Opted in to priority preemption.
    pub preemptible: bool,
    /// Its allocation id: evictions name it, so the applier can tell a
    /// stale one (invariant 3).
    pub alloc_id: u64,
    /// Set while it is being stopped for this blocked job (evicted, within
    /// its grace): it is no candidate again, and that job waits for it
    /// instead of evicting more.
    pub evicted_for: Option<JobId>,
    /// Placed by idle-fill on capacity lent past its QOS node cap: it
    /// counts toward no quota and is reclaimed when a job with a claim
    /// needs its hosts.
    pub borrowed: bool,
    /// How many times idle-fill reclaimed it before (its exempt window
    /// doubles with each).
    pub reclaims: u32,
}

/// The state a pass reads: hosts (with what is allocated on them), the
/// pending jobs (in submit order; the pass orders them by priority), the
/// running jobs with their end times, and the site's policy objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    pub hosts: Vec<Host>,
    /// Shared, so that a caller keeping its pending jobs' views between
    /// passes hands them over without copying them (a deep queue's copy
    /// was most of the leader's pass).
    pub pending: Vec<Arc<PendingJob>>,
    pub running: Vec<RunningJob>,
    pub partitions: Vec<Partition>,
    pub qos: Vec<Qos>,
    pub accounts: Vec<Account>,
    pub users: Vec<UserRecord>,
    pub usage: Usage,
    /// Admin reservations (windows on hosts), ended ones included.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<AdminReservation>,
}

/// Slurm's multifactor priority weights (`PriorityWeight*`) and ages.
/// Each factor is in [0, 1]; a job's priority is the sum of weight times
/// factor, truncated to a whole number, plus the admin inputs (account and
/// user priority) minus its nice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriorityWeights {
    /// Default 168 with `max_age_s` a week: one unit per hour waited, as
    /// the queue model's default aging.
    pub age: u32,
    pub fairshare: u32,
    pub job_size: u32,
    pub partition: u32,
    pub qos: u32,
    /// Weight of the association factor: (account + user priority) over
    /// the highest such sum.
    pub assoc: u32,
    /// Age at which the age factor reaches 1 (`PriorityMaxAge`).
    pub max_age_s: u64,
    /// Fair-share usage half-life (`PriorityDecayHalfLife`); 0 = no decay.
    pub decay_half_life_s: u64,
}

impl Default for PriorityWeights {
    fn default() -> Self {
        PriorityWeights {
            age: 168,
            fairshare: 0,
            job_size: 0,
            partition: 0,
            qos: 0,
            assoc: 0,
            max_age_s: 7 * 86_400,
            decay_half_life_s: 7 * 86_400,
        }
    }
}

/// Knobs of the pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// At most this many jobs are examined per pass (Slurm's
    /// `default_queue_depth`): the bound on a pass's work.
    pub max_jobs_per_pass: usize,
    /// EASY backfill; `false` is strict priority order.
    pub backfill: bool,
    /// How many blocked jobs, from the top of the queue, get a reservation.
    pub bf_reservations: usize,
    /// Reservation start times are rounded up to this (`bf_resolution`).
    pub bf_resolution_s: u64,
    /// How far ahead reservations are planned (`bf_window`); a job whose
    /// earliest room lies beyond it gets no reservation. 0 = unbounded.
    pub bf_window_s: u64,
    /// At most this many jobs are tried for backfill per pass after the
    /// first blocked one (`bf_max_job_test`).
    pub bf_max_job_test: usize,
    /// Host examinations a pass may make before it stops trying jobs (the
    /// per-pass budget, counted in work rather than read from a clock so
    /// that passes stay deterministic).
    pub pass_budget_host_checks: u64,
    pub priority: PriorityWeights,
    /// Preemption: off unless `preemption.enabled`.
    pub preemption: PreemptPolicy,
    /// Lending capacity quotas leave idle, and reclaiming it (off by
    /// default).
    pub idle_fill: IdleFill,
    /// How many of the reserved heads, from the top, reserve on every
    /// alternative where their partition has `reserve_all_alternatives`.
    pub reserve_all_alternatives_top_n: usize,
    /// How long a job may hold a multi-path reservation without starting
    /// before it falls back to one path (MAX_RESERVE_TIME); 0 = unbounded.
    pub max_reserve_time_s: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_jobs_per_pass: 10_000,
            backfill: true,
            bf_reservations: 1,
            bf_resolution_s: 0,
            bf_window_s: 0,
            bf_max_job_test: 100_000,
            pass_budget_host_checks: 50_000_000,
            priority: PriorityWeights::default(),
            preemption: PreemptPolicy::default(),
            idle_fill: IdleFill::default(),
            reserve_all_alternatives_top_n: 1,
            max_reserve_time_s: 0,
        }
    }
}

/// One job placed on one host: what the live state machine applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub job_id: JobId,
    pub host: String,
    /// What it takes on the host (the whole host for an exclusive job).
    pub resources: Resources,
    /// The partition it runs in ("" when the site has none).
    #[serde(default)]
    pub partition: String,
    /// Which of its resource paths (alternatives) it got; 0 without any.
    #[serde(default)]
    pub path: usize,
    /// The other alternatives it held a multi-path reservation on, let go
    /// now that it starts (empty when it held none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<usize>,
}

/// A multi-host job (a gang) placed on all its hosts at once. Kept apart
/// from [`Placement`] so that a one-host start stays one host name; the
/// live state machine re-checks every host of a gang and starts it on all
/// of them or none, its batch script on the first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangPlacement {
    pub job_id: JobId,
    /// In name order.
    pub hosts: Vec<String>,
    /// What it takes on each host.
    pub resources: Resources,
    #[serde(default)]
    pub partition: String,
    #[serde(default)]
    pub path: usize,
    /// As [`Placement::released`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<usize>,
}

/// Room promised to a blocked job: where and from when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub job_id: JobId,
    pub start_ms: u64,
    /// Indexes into the snapshot's `hosts` ([`host_names`] turns them into
    /// names). Indexes, not names: a pass makes a reservation for its head
    /// job on every pass, and nothing but the reader of a plan needs names.
    pub hosts: Vec<usize>,
}

/// The names of `hosts`, indexes into `snapshot.hosts` as a [`Reservation`]
/// holds them; an index out of range names nothing.
pub fn host_names<'s>(snapshot: &'s Snapshot, hosts: &[usize]) -> Vec<&'s str> {
    hosts
        .iter()
        .filter_map(|&i| snapshot.hosts.get(i).map(|h| h.name.as_str()))
        .collect()
}

/// What a pass decided: placements to propose (single-host jobs in
/// `starts`, gangs in `gang_starts`), reservations it kept room for, and
/// why each job it looked at and did not place is waiting, with a sentence
/// carrying the numbers where there are any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub starts: Vec<Placement>,
    pub reasons: BTreeMap<JobId, Reason>,
    #[serde(default)]
    pub gang_starts: Vec<GangPlacement>,
    #[serde(default)]
    pub reservations: Vec<Reservation>,
    /// The reason in words with its numbers, e.g. `gpus 12 in use + 8
    /// asked > 16 (QOS team GrpTRES)`.
    #[serde(default)]
    pub details: BTreeMap<JobId, String>,
    /// Jobs started behind a job that had to wait for room: backfill starts.
    #[serde(default)]
    pub backfilled: Vec<JobId>,
    /// Every pending job's priority and its parts as this pass ranked them
    /// (what `sprio` shows). Not serialized: plans written out by the
    /// simulator and their digests stay as they were.
    #[serde(skip)]
    pub priorities: Vec<priority::PriorityBreakdown>,
    /// Running jobs to stop for blocked ones (preemption, reclaim).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evictions: Vec<Eviction>,
    /// This pass's preemption counters (what the metrics add up).
    #[serde(default, skip_serializing_if = "PreemptCounters::is_zero")]
    pub preemption: PreemptCounters,
    /// Jobs this plan starts on lent capacity (idle-fill): outside every
    /// quota aggregate, reclaimable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub borrowed: Vec<JobId>,
    /// Jobs holding room on every alternative (their earliest is also in
    /// `reservations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multipath: Vec<MultiPathReservation>,
    #[serde(default, skip_serializing_if = "MultiPathCounters::is_zero")]
    pub multipath_counters: MultiPathCounters,
}

/// What `request` takes on `host`: the whole host when `exclusive`. `None`
/// when the host could never hold it, even empty.
pub fn need_on(host: &Host, request: Resources, exclusive: bool) -> Option<Resources> {
    let total = host.inventory.resources();
    if !request.within(total) {
        return None;
    }
    Some(if exclusive { total } else { request })
}

/// Shapes that found no room now in this pass. A pass only takes room,
/// never frees it, so a later job asking at least as much of the same kind
/// of host for at least as long cannot find room either and is not
/// searched for. Bounded: the list keeps the most recent entries.
struct NoRoom<'a> {
    seen: Vec<NoRoomEntry<'a>>,
}

struct NoRoomEntry<'a> {
    /// The placement kind ([`Pool::kind`]): partition and kind requirements.
    kind: u32,
    shape: &'a Shape,
    duration_ms: Option<u64>,
}

const NO_ROOM_REMEMBERED_MAX: usize = 64;

impl<'a> NoRoom<'a> {
    fn dominated(&self, kind: u32, shape: &Shape, duration_ms: Option<u64>) -> bool {
        self.seen.iter().any(|e| {
            e.kind == kind
                && e.shape.exclusive == shape.exclusive
                && e.shape.hosts_needed() <= shape.hosts_needed()
                && e.shape.per_host.within(shape.per_host)
                && match (e.duration_ms, duration_ms) {
                    (_, None) => true,
                    (None, Some(_)) => false,
                    (Some(a), Some(b)) => a <= b,
                }
        })
    }

    fn remember(&mut self, kind: u32, shape: &'a Shape, duration_ms: Option<u64>) {
        if self.seen.len() == NO_ROOM_REMEMBERED_MAX {
            self.seen.remove(0);
        }
        self.seen.push(NoRoomEntry {
            kind,
            shape,
            duration_ms,
        });
    }
}

/// Why one (partition, path) of a job did not start.
enum Miss {
    /// Only free room is missing: the job can wait for it (a reservation).
    Room {
        path: usize,
        classes: Classes,
        /// Its partition reserves on every alternative.
        all_paths: bool,
    },
    Limit(LimitHit),
    /// It could never run there (partition limits, no such hosts).
    Never(Reason, String),
}

/// The outcome for one job.
pub(crate) enum Outcome {
    Started,
    Waiting(Reason, Option<String>),
    /// Only room is missing; a reservation may be made.
    NeedsRoom,
}

/// Runs one pass over `snapshot` at `now_ms`.
///
/// Jobs are taken in queue order (priority, then least-served account,
/// then submit time). A job waits for what holds it: held, dependencies,
/// begin time, its array's `%max`, partition limits, QOS and association
/// limits, no host of its kind, or room. Only the last one makes it the
/// head of the queue: with backfill on, the first `bf_reservations` such
/// jobs get a reservation and the jobs behind them start only around it;
/// with backfill off, it blocks every job behind it. Jobs held by a limit
/// wait without blocking anyone.
pub fn schedule(snapshot: &Snapshot, policy: &Policy, now_ms: u64) -> Plan {
    schedule_with(
        snapshot,
        Cow::Owned(HostLayout::new(snapshot)),
        policy,
        now_ms,
    )
}

/// [`schedule`] with the snapshot's hosts already laid out: `layout` must
/// be what [`HostLayout::new`] makes of `snapshot` (debug builds check). A
/// caller whose hosts keep their states and attributes between passes
/// keeps it between them. One whose up hosts are not the snapshot's is
/// stale and made anew rather than used.
pub fn schedule_in(snapshot: &Snapshot, layout: &HostLayout, policy: &Policy, now_ms: u64) -> Plan {
    let layout = if layout.same_up_hosts(snapshot) {
        Cow::Borrowed(layout)
    } else {
        Cow::Owned(HostLayout::new(snapshot))
    };
    schedule_with(snapshot, layout, policy, now_ms)
}

fn schedule_with<'a>(
    snapshot: &'a Snapshot,
    layout: Cow<'a, HostLayout>,
    policy: &Policy,
    now_ms: u64,
) -> Plan {
    let catalog = Catalog::new(snapshot);
    let fairshare = priority::fairshare_factors(snapshot, &catalog);
    let served = priority::served_fractions(snapshot, &catalog);
    let breakdowns = priority::priorities(snapshot, &catalog, &policy.priority, &fairshare, now_ms);
    let mut order = priority::queue_order(&snapshot.pending, &breakdowns, &served, &catalog);
    // Room freed by evictions belongs to the jobs it was freed for.
    if snapshot.pending.iter().any(|p| p.room_freed) {
        order.sort_by_key(|&i| !snapshot.pending[i].room_freed);
    }
    let mut tally = Tally::new(snapshot, &catalog, now_ms);
    let mut pool = Pool::with_layout(snapshot, layout, now_ms);
    let windows = resv::Windows::block(&snapshot.reservations, &mut pool, now_ms);
    let mut no_room = NoRoom { seen: Vec::new() };
    let mut array_running: FxMap<JobId, u32> = FxMap::default();
    // Borrowed runs are outside array concurrency too (idle-fill).
    for r in snapshot.running.iter().filter(|r| !r.borrowed) {
        if let Some(a) = r.array {
            *array_running.entry(a.array_id).or_default() += 1;
        }
    }
    let mut plan = Plan::default();
    // The reasons the walk gives, put into `plan.reasons` before anything
    // reads them (see `Given`).
    let mut given = Given::default();
    // FIFO: set once a job is blocked; everything behind it waits.
    let mut blocked = false;
    let mut reservations_made = 0usize;
    let mut multipath_made = 0usize;
    // Jobs tried after the first one that had to wait for room.
    let mut backfill_tested = 0usize;
    let mut head_seen = false;
    let mut preemptor = Preemptor::new(snapshot, policy, &fairshare, now_ms);
    let mut opportunistic =
        Opportunistic::new(snapshot, &catalog, &pool, &policy.idle_fill, now_ms);
    // Jobs a limit holds, in queue order: idle-fill's borrow candidates.
    let mut limit_held: Vec<usize> = Vec::new();
    // Lending comes after every job of the queue had its turn; a pass
    // cut short by a bound lends nothing (deep queues: lending goes first).
    let mut walked_all = true;
    // Jobs examined against `max_jobs_per_pass`.
    let mut examined = 0usize;
    let fairshare_of = |account: &str| fairshare.get(account).copied();

    for &idx in &order {
        let job = &snapshot.pending[idx];
        // What holds a job by its own record is judged without counting
        // against the bound, as Slurm leaves held, dependent and
        // not-yet-eligible jobs out of the queue its depth counts: a deep
        // pile of held jobs ahead must not hide the runnable ones behind.
        let unqueued = if job.held {
            Some(Reason::JobHeldUser)
        } else if let Some(r) = job.dependency {
            Some(r)
        } else if job.begin_ms > now_ms {
            Some(Reason::BeginTime)
        } else {
            None
        };
        if let Some(reason) = unqueued {
            given.reason(job.id, reason);
            continue;
        }
        if examined == policy.max_jobs_per_pass {
            walked_all = false;
            break;
        }
        examined += 1;
        let early = if job.array.is_some_and(|a| {
            a.max_running > 0
                && array_running.get(&a.array_id).copied().unwrap_or(0) >= a.max_running
        }) {
            Some(Reason::JobArrayTaskLimit)
        } else if blocked {
            Some(Reason::Priority)
        } else {
            None
        };
        if let Some(reason) = early {
            given.reason(job.id, reason);
            continue;
        }
        if pool.host_checks >= policy.pass_budget_host_checks {
            // Out of budget: the rest keep the reasons they had.
            walked_all = false;
            break;
        }
        if head_seen {
            backfill_tested += 1;
            if backfill_tested > policy.bf_max_job_test {
                walked_all = false;
                given.reason(job.id, Reason::Priority);
                continue;
            }
        }
        let outcome = if job.reservation.is_empty() {
            try_job(
                job,
                &catalog,
                &mut tally,
                &mut pool,
                &mut no_room,
                &snapshot.usage,
                &fairshare_of,
                now_ms,
                &mut plan,
            )
        } else {
            let account = catalog.account_of(&job.user, &job.account);
            let ctx = resv::Ctx {
                catalog: &catalog,
                tally: &mut tally,
                pool: &mut pool,
                usage: &snapshot.usage,
                fairshare: fairshare_of(account.map_or("", |a| a.name.as_str())),
                now_ms,
            };
            let outcome = resv::try_reserved(job, &snapshot.reservations, ctx, &mut plan);
            (outcome, Vec::new())
        };
        let misses = match outcome {
            (Outcome::Started, _) => {
                if head_seen {
                    plan.backfilled.push(job.id);
                }
                if let Some(a) = job.array {
                    *array_running.entry(a.array_id).or_default() += 1;
                }
                continue;
            }
            (Outcome::Waiting(reason, detail), _) => {
                let limit = matches!(reason, Reason::Limit(..));
                given.reason(job.id, reason);
                if let Some(d) = detail {
                    plan.details.insert(job.id, d);
                }
                if limit && policy.idle_fill.enabled && job.room_freed {
                    // Room was reclaimed for this borrower: it takes it
                    // now, ahead of everyone, as room freed by evictions
                    // belongs to the job it was freed for.
                    let mut cx = LendCtx {
                        snapshot,
                        catalog: &catalog,
                        tally: &mut tally,
                        pool: &mut pool,
                        usage: &snapshot.usage,
                        fairshare: &fairshare_of,
                        opportunistic: &mut opportunistic,
                        plan: &mut plan,
                        now_ms,
                        budget_host_checks: policy.pass_budget_host_checks,
                    };
                    given.flush(cx.plan);
                    idlefill::lend(&policy.idle_fill, &[idx], &mut cx);
                } else if limit {
                    limit_held.push(idx);
                }
                continue;
            }
            (Outcome::NeedsRoom, misses) => misses,
        };
        // Lent capacity is recovered before anything else is tried.
        if opportunistic.any() {
            let mut cx = LendCtx {
                snapshot,
                catalog: &catalog,
                tally: &mut tally,
                pool: &mut pool,
                usage: &snapshot.usage,
                fairshare: &fairshare_of,
                opportunistic: &mut opportunistic,
                plan: &mut plan,
                now_ms,
                budget_host_checks: policy.pass_budget_host_checks,
            };
            // Its room is being recovered (or already is): it waits for
            // its victims to leave, holding that room, with no reservation.
            if reclaim::reclaim_for(job, &mut cx) {
                given.reason(job.id, Reason::Resources);
                continue;
            }
        }
        head_seen = true;
        if policy.preemption.enabled {
            let rooms: Vec<(usize, &[usize])> = misses
                .iter()
                .filter_map(|m| match m {
                    Miss::Room { path, classes, .. } => Some((*path, &**classes)),
                    _ => None,
                })
                .collect();
            let priority = breakdowns.get(idx).map_or(0, |b| b.total);
            preemptor.try_for(job, priority, &rooms, &mut pool, &catalog, &mut plan);
        }
        // A job only a maintenance window keeps from starting says so
        // (and still gets its promise after the window, below).
        let maintenance = maintenance_reason(job, &misses, &windows, &pool, now_ms);
        let room_reason = match maintenance {
            Some(detail) => {
                plan.details.insert(job.id, detail);
                Reason::ReservedForMaintenance
            }
            None => Reason::Resources,
        };
        if !policy.backfill {
            given.reason(job.id, room_reason);
            blocked = true;
            continue;
        }
        // Looked up only while reservations are left: past them (most
        // jobs of a deep queue) the answer is Priority either way.
        if reservations_made < policy.bf_reservations && !no_reserve(job, &catalog) {
            reservations_made += 1;
            let multi = misses.iter().any(|m| {
                matches!(
                    m,
                    Miss::Room {
                        all_paths: true,
                        ..
                    }
                )
            }) && multipath::wanted(job, policy, multipath_made, now_ms, &mut plan);
            if multi && reserve_all(job, &misses, &mut pool, policy, now_ms, &mut plan) {
                multipath_made += 1;
            } else {
                reserve(job, misses, &mut pool, policy, now_ms, &mut plan);
            }
            given.reason(job.id, room_reason);
        } else {
            given.reason(job.id, Reason::Priority);
        }
    }
    if policy.idle_fill.enabled && walked_all && !limit_held.is_empty() {
        let mut cx = LendCtx {
            snapshot,
            catalog: &catalog,
            tally: &mut tally,
            pool: &mut pool,
            usage: &snapshot.usage,
            fairshare: &fairshare_of,
            opportunistic: &mut opportunistic,
            plan: &mut plan,
            now_ms,
            budget_host_checks: policy.pass_budget_host_checks,
        };
        given.flush(cx.plan);
        idlefill::lend(&policy.idle_fill, &limit_held, &mut cx);
    }
    given.flush(&mut plan);
    plan.priorities = breakdowns;
    plan
}

/// Whether `job`'s QOS has `NoReserve`: it waits without a reservation.
fn no_reserve(job: &PendingJob, catalog: &Catalog) -> bool {
    catalog
        .account_of(&job.user, &job.account)
        .map(|a| catalog.qos_name_of(&job.qos, Some(a)))
        .or(Some(job.qos.as_str()).filter(|q| !q.is_empty()))
        .and_then(|q| catalog.qos(q))
        .is_some_and(|q| q.flags.no_reserve)
}

/// Reasons given in queue order, put into `Plan::reasons` in one go: each
/// inserted as it came lands at a random place in the map (ids are not in
/// queue order), which was ~7% of a pass over 10,000 jobs; built from
/// sorted pairs, the map is made in one sweep.
#[derive(Default)]
struct Given {
    reasons: Vec<(JobId, Reason)>,
}

impl Given {
    fn reason(&mut self, job: JobId, reason: Reason) {
        self.reasons.push((job, reason));
    }

    /// Puts the reasons given so far into `plan`, a later one for the same
    /// job replacing an earlier one, as inserting them would.
    fn flush(&mut self, plan: &mut Plan) {
        if !plan.reasons.is_empty() {
            plan.reasons.extend(self.reasons.drain(..));
            return;
        }
        // Stable: a job's reasons stay in the order given.
        self.reasons.sort_by_key(|&(job, _)| job);
        let mut last_wins: Vec<(JobId, Reason)> = Vec::with_capacity(self.reasons.len());
        for (job, reason) in self.reasons.drain(..) {
            match last_wins.last_mut() {
                Some((last, r)) if *last == job => *r = reason,
                _ => last_wins.push((job, reason)),
            }
        }
        plan.reasons = last_wins.into_iter().collect();
    }
}

/// Gives `job` the earliest room over the paths that only lacked room.
fn reserve(
    job: &PendingJob,
    misses: Vec<Miss>,
    pool: &mut Pool<'_>,
    policy: &Policy,
    now_ms: u64,
    plan: &mut Plan,
) {
    let paths = job.paths();
    let mut best: Option<(u64, usize, Vec<usize>)> = None;
    for miss in misses {
        let Miss::Room { path, classes, .. } = miss else {
            continue;
        };
        let Some((at_ms, hosts)) =
            pool.earliest_room(&paths[path], &classes, now_ms, job.duration_ms())
        else {
            continue;
        };
        if best.as_ref().is_none_or(|b| at_ms < b.0) {
            best = Some((at_ms, path, hosts));
        }
    }
    let Some((at_ms, path, hosts)) = best else {
        return;
    };
    let Some(at_ms) = promise_at(at_ms, policy, now_ms) else {
        return;
    };
    pool.take(&paths[path], &hosts, at_ms, job.duration_ms(), now_ms);
    plan.reservations.push(Reservation {
        job_id: job.id,
        start_ms: at_ms,
        hosts: pool.snapshot_indexes(&hosts),
    });
}

/// `at_ms` rounded up to `bf_resolution_s`; `None` beyond `bf_window_s`.
fn promise_at(mut at_ms: u64, policy: &Policy, now_ms: u64) -> Option<u64> {
    if policy.bf_resolution_s > 0 {
        let step_ms = policy.bf_resolution_s.saturating_mul(1000);
        at_ms = at_ms.div_ceil(step_ms).saturating_mul(step_ms);
    }
    let beyond = policy.bf_window_s > 0
        && at_ms > now_ms.saturating_add(policy.bf_window_s.saturating_mul(1000));
    (!beyond).then_some(at_ms)
}

/// Gives `job` room on every alternative of an opted-in partition that
/// only lacked room, each from its own earliest start (computed before any
/// is taken: the job will use one of them, so they do not compete). False
/// when fewer than two alternatives can be promised: the caller makes an
/// ordinary reservation instead.
fn reserve_all(
    job: &PendingJob,
    misses: &[Miss],
    pool: &mut Pool<'_>,
    policy: &Policy,
    now_ms: u64,
    plan: &mut Plan,
) -> bool {
    let paths = job.paths();
    let mut rooms: Vec<(usize, u64, Vec<usize>)> = Vec::new();
    for miss in misses {
        let Miss::Room {
            path,
            classes,
            all_paths: true,
        } = miss
        else {
            continue;
        };
        if rooms.iter().any(|r| r.0 == *path) {
            continue; // the same alternative in a later partition
        }
        let found = pool
            .earliest_room(&paths[*path], classes, now_ms, job.duration_ms())
            .and_then(|(at_ms, hosts)| Some((promise_at(at_ms, policy, now_ms)?, hosts)));
        if let Some((at_ms, hosts)) = found {
            rooms.push((*path, at_ms, hosts));
        }
    }
    if rooms.len() < 2 {
        return false;
    }
    let mut held = Vec::with_capacity(rooms.len());
    for (path, at_ms, hosts) in rooms {
        pool.take(&paths[path], &hosts, at_ms, job.duration_ms(), now_ms);
        held.push(PathReservation {
            path,
            start_ms: at_ms,
            hosts: pool.snapshot_indexes(&hosts),
        });
    }
    multipath::record(job, held, plan);
    true
}

/// The words for a job that only a maintenance window keeps from starting
/// on one of the paths that lacked room.
fn maintenance_reason(
    job: &PendingJob,
    misses: &[Miss],
    windows: &resv::Windows<'_>,
    pool: &Pool<'_>,
    now_ms: u64,
) -> Option<String> {
    if windows.is_empty() {
        return None;
    }
    misses.iter().find_map(|m| {
        let Miss::Room { path, classes, .. } = m else {
            return None;
        };
        let r = windows.maintenance_blocking(
            pool,
            &job.paths()[*path],
            classes,
            now_ms,
            job.duration_ms(),
        )?;
        Some(format!(
            "Reserved for maintenance: {} holds {} host(s) from {} s to {} s",
            r.name,
            r.hosts.len(),
            r.start_ms / 1000,
            r.end_ms / 1000
        ))
    })
}

/// Tries every partition and path of `job`; starts it on the first that
/// has room and passes the limits.
#[allow(clippy::too_many_arguments)]
fn try_job<'a>(
    job: &'a PendingJob,
    catalog: &Catalog<'a>,
    tally: &mut Tally,
    pool: &mut Pool<'a>,
    no_room: &mut NoRoom<'a>,
    usage: &Usage,
    fairshare_of: &dyn Fn(&str) -> Option<f64>,
    now_ms: u64,
    plan: &mut Plan,
) -> (Outcome, Vec<Miss>) {
    // A site without accounts (a bare trace replay) runs jobs without
    // associations; with accounts, a job must have one.
    let account = catalog.account_of(&job.user, &job.account);
    if account.is_none() && catalog.has_accounts {
        return (
            Outcome::Waiting(
                Reason::InvalidAccount,
                Some(format!(
                    "user {} has no account {:?}",
                    job.user, job.account
                )),
            ),
            Vec::new(),
        );
    }
    let account_name = account.map_or("", |a| a.name.as_str());
    let qos_name = catalog.qos_name_of(&job.qos, account);
    let Some(qos) = catalog.qos(qos_name) else {
        return (
            Outcome::Waiting(Reason::InvalidQos, Some(format!("no QOS named {qos_name}"))),
            Vec::new(),
        );
    };
    // Most sites, and every trace replay, have no partitions: no list is
    // made for them.
    let listed: Vec<Option<&'a Partition>>;
    let partitions: &[Option<&'a Partition>] = if catalog.partitioned {
        listed = catalog.partitions_of(job).into_iter().map(Some).collect();
        &listed
    } else {
        &[None]
    };
    if partitions.is_empty() {
        return (
            Outcome::Waiting(
                Reason::ReqNodeNotAvail,
                Some(format!("no such partition: {}", job.partitions.join(","))),
            ),
            Vec::new(),
        );
    }
    let duration_ms = job.duration_ms();
    let fairshare = fairshare_of(account_name);
    let mut misses: Vec<Miss> = Vec::new();
    for &partition in partitions {
        let pname = partition.map(|p| p.name.as_str());
        let all_paths = partition.is_some_and(|p| p.reserve_all_alternatives);
        for (path, shape) in job.paths().iter().enumerate() {
            if !catalog.runs_in(job, path, partition) {
                continue;
            }
            if let Some(p) = partition {
                if let Err(hit) = limits::check_partition(shape, job.time_limit_s, p, qos) {
                    misses.push(Miss::Never(hit.reason, hit.detail));
                    continue;
                }
            }
            let kind = pool.kind(shape, pname);
            let classes = pool.eligible_classes(kind, shape);
            let capable = pool.hosts_in(&classes);
            if capable < shape.hosts_needed() {
                misses.push(Miss::Never(
                    Reason::ReqNodeNotAvail,
                    format!(
                        "needs {} of its kind{}, {} up",
                        match shape.hosts_needed() {
                            1 => "1 host".to_string(),
                            n => format!("{n} hosts"),
                        },
                        pname
                            .map(|p| format!(" in partition {p}"))
                            .unwrap_or_default(),
                        capable
                    ),
                ));
                continue;
            }
            let request = LimitRequest {
                user: &job.user,
                account: account_name,
                qos,
                partition,
                shape,
                time_limit_s: job.time_limit_s,
                hosts: None,
                fairshare,
                has_reservation: !job.reservation.is_empty(),
            };
            let mut exact_nodes = false;
            if let Err(hit) = limits::check(&request, catalog, tally, usage) {
                // A node limit counts distinct hosts: landing on hosts the
                // group already occupies may still be within it, but never
                // for a job that takes whole hosts (those are not empty).
                if hit.never || !counts_nodes(&hit.reason) || shape.exclusive {
                    misses.push(Miss::Limit(hit));
                    continue;
                }
                exact_nodes = true;
            }
            if no_room.dominated(kind, shape, duration_ms) {
                misses.push(Miss::Room {
                    path,
                    classes,
                    all_paths,
                });
                continue;
            }
            let Some(hosts) = pool.room_now(shape, &classes, now_ms, duration_ms, None) else {
                no_room.remember(kind, shape, duration_ms);
                misses.push(Miss::Room {
                    path,
                    classes,
                    all_paths,
                });
                continue;
            };
            if exact_nodes {
                let name_refs = pool.name_refs(&hosts);
                let exact = LimitRequest {
                    hosts: Some(&name_refs),
                    ..request
                };
                if let Err(hit) = limits::check(&exact, catalog, tally, usage) {
                    misses.push(Miss::Limit(hit));
                    continue;
                }
            }
            place(
                job,
                shape,
                partition,
                path,
                &hosts,
                Some((account_name, qos)),
                tally,
                pool,
                plan,
                now_ms,
            );
            return (Outcome::Started, Vec::new());
        }
    }
    if misses.iter().any(|m| matches!(m, Miss::Room { .. })) {
        return (Outcome::NeedsRoom, misses);
    }
    // Limits first (they may lift), then what can never change.
    let waiting = misses
        .iter()
        .find_map(|m| match m {
            Miss::Limit(hit) => Some((hit.reason, hit.detail.clone())),
            _ => None,
        })
        .or_else(|| {
            misses.into_iter().find_map(|m| match m {
                Miss::Never(reason, detail) => Some((reason, detail)),
                _ => None,
            })
        });
    let (reason, detail) = waiting.unwrap_or((
        Reason::ReqNodeNotAvail,
        "no resource path to try".to_string(),
    ));
    (Outcome::Waiting(reason, Some(detail)), Vec::new())
}

/// Starts `job` on `hosts` (pool indices) of `partition` by its resource
/// path `path`: takes the room in `pool`, charges the placement to
/// `tally` as (account, QOS) in `charge` (`None` for a borrowed run, which
/// sits outside every quota aggregate), and adds it to `plan`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place(
    job: &PendingJob,
    shape: &Shape,
    partition: Option<&Partition>,
    path: usize,
    hosts: &[usize],
    charge: Option<(&str, &Qos)>,
    tally: &mut Tally,
    pool: &mut Pool<'_>,
    plan: &mut Plan,
    now_ms: u64,
) {
    let (names, per_host) = take_room(job, shape, partition, hosts, charge, tally, pool, now_ms);
    let partition_name = partition.map_or("", |p| p.name.as_str());
    push_start(plan, job, names, per_host, partition_name, path);
}

/// Adds `job`'s start on `names` by its path `path` to `plan`: one host in
/// `starts`, a gang in `gang_starts`, with the other alternatives it held
/// a multi-path reservation on as released.
pub(crate) fn push_start(
    plan: &mut Plan,
    job: &PendingJob,
    mut names: Vec<String>,
    resources: Resources,
    partition: &str,
    path: usize,
) {
    let released: Vec<usize> = job
        .multipath_held
        .iter()
        .copied()
        .filter(|&held| held != path)
        .collect();
    if names.len() == 1 {
        plan.starts.push(Placement {
            job_id: job.id,
            host: names.pop().unwrap_or_default(),
            resources,
            partition: partition.to_string(),
            path,
            released,
        });
    } else {
        plan.gang_starts.push(GangPlacement {
            job_id: job.id,
            hosts: names,
            resources,
            partition: partition.to_string(),
            path,
            released,
        });
    }
}

/// Takes `job`'s room on `hosts` for this pass and charges it to `tally`
/// (see [`place`]): a start, or room promised to a job whose victims are
/// being evicted. Returns the hosts' names and what it takes on each.
#[allow(clippy::too_many_arguments)]
pub(crate) fn take_room(
    job: &PendingJob,
    shape: &Shape,
    partition: Option<&Partition>,
    hosts: &[usize],
    charge: Option<(&str, &Qos)>,
    tally: &mut Tally,
    pool: &mut Pool<'_>,
    now_ms: u64,
) -> (Vec<String>, Resources) {
    let names = pool.names(hosts);
    let per_host = pool.take(shape, hosts, now_ms, job.duration_ms(), now_ms);
    if let Some((account, qos)) = charge.filter(|_| tally.books_any()) {
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let partition_qos = partition.map(|p| p.qos.as_str()).filter(|q| !q.is_empty());
        tally.charge(&Charge {
            user: &job.user,
            account,
            qos: &qos.name,
            partition_qos,
            hosts: &name_refs,
            per_host,
            time_limit_s: job.time_limit_s,
        });
    }
    (names, per_host)
}

/// Limits that count hosts, where which hosts matters.
pub(crate) fn counts_nodes(reason: &Reason) -> bool {
    matches!(
        reason,
        Reason::Limit(
            _,
            LimitKind::GrpTres(TresKind::Node) | LimitKind::MaxTresPerUser(TresKind::Node)
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostState, Inventory};

    fn host(name: &str, cpus: u32) -> Host {
        Host::new(name, Inventory::cpu_mem(cpus, 1024))
    }

    fn job(id: JobId, cpus: u32) -> PendingJob {
        PendingJob::new(id, Resources::cpu_mem(cpus, 0))
    }

    #[test]
    fn places_in_fifo_order_first_fit() {
        let snap = Snapshot {
            hosts: vec![host("b", 4), host("a", 2)],
            pending: PendingJob::queue([job(1, 2), job(2, 4), job(3, 1)]),
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        let placed: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(placed, vec![(1, "a"), (2, "b")]);
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Resources));
    }

    #[test]
    fn blocked_job_holds_back_the_queue() {
        let snap = Snapshot {
            hosts: vec![host("a", 2)],
            pending: PendingJob::queue([job(1, 2), job(2, 2), job(3, 1)]),
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.starts.len(), 1);
        assert_eq!(plan.reasons.get(&2), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Priority));
    }

    #[test]
    fn impossible_job_does_not_block() {
        let snap = Snapshot {
            hosts: vec![host("a", 2)],
            pending: PendingJob::queue([job(1, 64), job(2, 1), job(3, 1)]),
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::ReqNodeNotAvail));
        assert_eq!(plan.starts.len(), 2);
    }

    #[test]
    fn held_jobs_are_skipped_and_bound_is_respected() {
        let mut held = job(1, 1);
        held.held = true;
        let snap = Snapshot {
            hosts: vec![host("a", 8)],
            pending: PendingJob::queue([held, job(2, 1), job(3, 1), job(4, 1)]),
            ..Snapshot::default()
        };
        let policy = Policy {
            max_jobs_per_pass: 2,
            ..Policy::default()
        };
        let plan = schedule(&snap, &policy, 0);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::JobHeldUser));
        // The held job does not use up the bound: two jobs are examined
        // and start; the fourth waits for the next pass.
        let started: Vec<JobId> = plan.starts.iter().map(|s| s.job_id).collect();
        assert_eq!(started, [2, 3]);
        assert_eq!(plan.reasons.get(&4), None);
    }

    #[test]
    fn jobs_held_by_their_own_record_do_not_use_up_the_bound() {
        // Ahead of the runnable job: a held one, one waiting on a
        // dependency and one whose begin time has not come.
        let mut held = job(1, 1);
        held.held = true;
        let mut dependent = job(2, 1);
        dependent.dependency = Some(Reason::Dependency);
        let mut later = job(3, 1);
        later.begin_ms = 60_000;
        let snap = Snapshot {
            hosts: vec![host("a", 8)],
            pending: PendingJob::queue([held, dependent, later, job(4, 1)]),
            ..Snapshot::default()
        };
        let policy = Policy {
            max_jobs_per_pass: 1,
            ..Policy::default()
        };
        let plan = schedule(&snap, &policy, 0);
        let started: Vec<JobId> = plan.starts.iter().map(|s| s.job_id).collect();
        assert_eq!(started, [4]);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::JobHeldUser));
        assert_eq!(plan.reasons.get(&2), Some(&Reason::Dependency));
        assert_eq!(plan.reasons.get(&3), Some(&Reason::BeginTime));
    }

    #[test]
    fn down_hosts_get_nothing() {
        let mut down = host("a", 8);
        down.state = HostState::Down;
        let snap = Snapshot {
            hosts: vec![down],
            pending: PendingJob::queue([job(1, 1)]),
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert!(plan.starts.is_empty());
        assert_eq!(plan.reasons.get(&1), Some(&Reason::ReqNodeNotAvail));
        assert_eq!(
            plan.details.get(&1).map(String::as_str),
            Some("needs 1 host of its kind, 0 up")
        );
    }

    fn running(id: JobId, host: &str, cpus: u32, end_ms: Option<u64>) -> RunningJob {
        RunningJob {
            id,
            hosts: vec![host.into()],
            per_host: Resources::cpu_mem(cpus, 0),
            end_ms,
            ..RunningJob::default()
        }
    }

    fn gang(id: JobId, nodes: u32, cpus: u32, time_limit_s: u64) -> PendingJob {
        let mut j = job(id, cpus);
        j.shape.nodes = nodes;
        j.time_limit_s = time_limit_s;
        j
    }

    /// Two hosts; `a` is full until 100 s. The 2-host head is promised both
    /// hosts at 100 s; a 50 s job backfills onto `b`, a 200 s one may not,
    /// and neither may a job with no limit.
    fn blocked_head() -> Snapshot {
        let mut a = host("a", 4);
        a.allocated.cpus = 4;
        Snapshot {
            hosts: vec![a, host("b", 4)],
            pending: PendingJob::queue([
                gang(1, 2, 4, 100),
                gang(2, 1, 4, 200),
                job(3, 4),
                gang(4, 1, 4, 50),
            ]),
            running: vec![running(9, "a", 4, Some(100_000))],
            ..Snapshot::default()
        }
    }

    #[test]
    fn easy_reserves_the_head_and_backfills_only_what_ends_in_time() {
        let snap = blocked_head();
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.reservations.len(), 1);
        let held = &plan.reservations[0];
        assert_eq!((held.job_id, held.start_ms), (1, 100_000));
        assert_eq!(host_names(&snap, &held.hosts), ["a", "b"]);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&2), Some(&Reason::Priority));
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Priority));
        let started: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(started, vec![(4, "b")]);
    }

    #[test]
    fn fifo_policy_backfills_nothing() {
        let policy = Policy {
            backfill: false,
            ..Policy::default()
        };
        let plan = schedule(&blocked_head(), &policy, 0);
        assert!(plan.starts.is_empty() && plan.reservations.is_empty());
        assert_eq!(plan.reasons.get(&1), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&4), Some(&Reason::Priority));
    }

    #[test]
    fn gangs_go_to_gang_starts_and_exclusive_takes_whole_hosts() {
        let mut busy = host("c", 4);
        busy.allocated.cpus = 1;
        let mut exclusive = gang(1, 2, 1, 0);
        exclusive.shape.exclusive = true;
        let snap = Snapshot {
            hosts: vec![host("a", 4), host("b", 4), busy],
            pending: PendingJob::queue([exclusive, job(2, 3)]),
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(
            plan.gang_starts,
            vec![GangPlacement {
                job_id: 1,
                hosts: vec!["a".into(), "b".into()],
                resources: Resources::cpu_mem(4, 1024),
                partition: String::new(),
                path: 0,
                released: Vec::new(),
            }]
        );
        let started: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(started, vec![(2, "c")]);
    }
}
