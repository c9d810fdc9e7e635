//! The parts of `apply` that read or change the policy tables: policy
//! changes themselves, submit-time checks and resolution (account, QOS,
//! default time limit), the limit re-check of a plan's placements
//! (invariant 3: the same `limits::check` the pass used), and usage
//! accrual for fair share and the usage limits.

use berth_scheduler::catalog::Catalog;
use berth_scheduler::limits::{self, Charge, LimitRequest, SubmitCounts, Tally};
use berth_scheduler::qos::NORMAL_QOS;
use berth_scheduler::usage::{RunCharge, Usage};
use berth_scheduler::{
    EvictCause, Job, JobId, JobSpec, JobState, PendingJob, Qos, Shape, Snapshot,
};

use super::{Dirty, PlannedStart, SmState};
use crate::command::Response;
use crate::policy::PolicyChange;

/// The submit-limit counts kept between submits, with the policy they were
/// counted under (both unchanged until a command other than a submit
/// drops them).
#[derive(Debug)]
pub(super) struct KeptSubmitCounts {
    /// The policy snapshot, without jobs.
    policy: Snapshot,
    counts: SubmitCounts,
}

/// The re-check state for one plan: the snapshot the limits are read
/// against, and what the plan's accepted placements hold so far.
pub(super) struct LimitRecheck {
    snapshot: Snapshot,
    tally: Tally,
}

impl SmState {
    pub(super) fn set_policy(
        &mut self,
        change: &PolicyChange,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        if let Err(reason) = self.data.policy.validate(change) {
            return Response::Rejected { reason };
        }
        if let PolicyChange::SetDecayHalfLife(_) = change {
            // Usage so far decays with the half-life it accrued under.
            self.accrue_usage(now_ms);
        }
        // A priority input change reaches the pending and running jobs of
        // that account or user, each with an event.
        let update = match change {
            PolicyChange::UpsertAccount(a) => {
                let old = self
                    .data
                    .policy
                    .accounts
                    .get(&a.name)
                    .map_or(0, |o| o.priority);
                (old != a.priority).then(|| {
                    (
                        format!("Priority updated: account {old} -> {}", a.priority),
                        Some(a.name.clone()),
                        None,
                    )
                })
            }
            PolicyChange::UpsertUser(u) => {
                let old = self
                    .data
                    .policy
                    .users
                    .get(&u.name)
                    .map_or(0, |o| o.priority);
                (old != u.priority).then(|| {
                    (
                        format!("Priority updated: user {old} -> {}", u.priority),
                        None,
                        Some(u.name.clone()),
                    )
                })
            }
            _ => None,
        };
        self.data.policy.apply(change);
        if let Some((text, account, user)) = update {
            let live: Vec<u64> = self.pending.iter().chain(&self.running).copied().collect();
            for id in live {
                let Some(record) = self.data.jobs.get_mut(&id) else {
                    continue;
                };
                let spec = &record.job.spec;
                let hit = account.as_ref().is_some_and(|a| spec.account == *a)
                    || user.as_ref().is_some_and(|u| spec.user == *u);
                if hit {
                    record.push_event(now_ms, "priority", text.clone());
                    dirty.jobs.insert(id);
                }
            }
        }
        Response::PolicySet
    }

    /// The policy objects as a scheduler snapshot (no hosts or jobs).
    pub fn policy_snapshot(&self) -> Snapshot {
        let policy = &self.data.policy;
        let mut qos: Vec<Qos> = policy.qos.values().cloned().collect();
        if !policy.qos.contains_key(NORMAL_QOS) {
            qos.push(Qos::default());
        }
        Snapshot {
            partitions: policy
                .partitions
                .values()
                .map(|p| p.partition.clone())
                .collect(),
            qos,
            accounts: policy.accounts.values().cloned().collect(),
            users: policy.users.values().cloned().collect(),
            usage: self.data.usage.usage.clone(),
            reservations: self.reservation_list(),
            ..Snapshot::default()
        }
    }

    /// The submit checks that read the policy (account, QOS and partition
    /// exist and are allowed, nice entitlement, DenyOnLimit, submit
    /// limits), and the spec as the job will keep it: with its resolved
    /// account and QOS, and the partition's default time limit when it
    /// asked for none (Slurm records all three at submit).
    pub(super) fn resolve_submit(&self, spec: &JobSpec) -> Result<JobSpec, String> {
        self.resolve_spec(spec, None)
    }

    /// Builds the counts the submit limits read, when some limit needs
    /// them and none are kept (see `SmState::submit_counts`).
    pub(super) fn prepare_submit_counts(&mut self) {
        let policy = &self.data.policy;
        if self.submit_counts.is_some() || policy.is_empty() || !policy.has_submit_limits() {
            return;
        }
        let snapshot = self.counting_snapshot(None);
        let counts = SubmitCounts::new(&snapshot, &Catalog::new(&snapshot));
        self.submit_counts = Some(KeptSubmitCounts {
            policy: Snapshot {
                pending: Vec::new(),
                running: Vec::new(),
                ..snapshot
            },
            counts,
        });
    }

    /// Adds the jobs a submit just made to the kept counts.
    pub(super) fn count_submitted(&mut self, tasks: &[JobSpec]) {
        let Some(kept) = self.submit_counts.as_mut() else {
            return;
        };
        let catalog = Catalog::new(&kept.policy);
        for spec in tasks {
            kept.counts.add(&pending_of(spec), &catalog);
        }
    }

    /// The policy, and with submit limits every unfinished job but
    /// `exclude`: what the submit checks read when no counts are kept.
    fn counting_snapshot(&self, exclude: Option<JobId>) -> Snapshot {
        let mut snapshot = self.policy_snapshot();
        if self.data.policy.has_submit_limits() {
            let full = self.snapshot_in_apply(true);
            snapshot.pending = full.pending;
            snapshot.pending.retain(|p| Some(p.id) != exclude);
            snapshot.running = full.running;
        }
        snapshot
    }

    /// [`Self::resolve_submit`] for a spec that replaces job `exclude`'s
    /// (`scontrol update`): that job does not count against its own
    /// submit limits.
    pub(super) fn resolve_spec(
        &self,
        spec: &JobSpec,
        exclude: Option<berth_scheduler::JobId>,
    ) -> Result<JobSpec, String> {
        let policy = &self.data.policy;
        if policy.is_empty() {
            // No partitions either: only the implicit one may be named.
            let named = !spec.partitions.is_empty()
                || spec.alternatives.iter().any(|a| !a.partition.is_empty());
            if named {
                let none = Snapshot::default();
                limits::check_partition_names(&pending_of(spec), &Catalog::new(&none))
                    .map_err(|e| e.to_string())?;
            }
            return Ok(spec.clone());
        }
        // A new submit reads the counts (and policy) kept between submits;
        // an update (which leaves its own job out) counts afresh.
        let kept = self.submit_counts.as_ref().filter(|_| exclude.is_none());
        let (owned, fresh);
        let snapshot = match kept {
            Some(kept) => &kept.policy,
            None => {
                owned = self.counting_snapshot(exclude);
                &owned
            }
        };
        let catalog = Catalog::new(snapshot);
        let job = pending_of(spec);
        let counts = match kept {
            Some(kept) => &kept.counts,
            None => {
                fresh = SubmitCounts::new(snapshot, &catalog);
                &fresh
            }
        };
        // Each task of an array is a job against the submit limits, as in
        // Slurm (a spec whose array text does not parse is refused later);
        // a task already made (an update of one) is one job.
        let new_jobs = if spec.array.is_empty() || spec.array_job_id != 0 {
            1
        } else {
            berth_scheduler::array::parse(&spec.array).map_or(1, |a| a.indexes.len() as u64)
        };
        limits::check_submit_jobs(&job, &catalog, counts, new_jobs).map_err(|e| e.to_string())?;
        let mut resolved = spec.clone();
        let account = catalog.account_of(&spec.user, &spec.account);
        if let Some(a) = account {
            resolved.account = a.name.clone();
        }
        resolved.qos = catalog.qos_name_of(&spec.qos, account).to_string();
        // A job that names no partition is in the default one from now on,
        // as in Slurm: squeue, sacct and `scancel -p` show and match it
        // there, and a later change of the default does not move it.
        if resolved.partitions.is_empty() {
            if let Some(default) = catalog.default_partition() {
                resolved.partitions = vec![default.name.clone()];
            }
        }
        if resolved.time_limit_s == 0 {
            if let Some(limit_s) = catalog
                .partitions_of(&job)
                .first()
                .and_then(|p| p.default_limit_s())
            {
                resolved.time_limit_s = limit_s;
            }
        }
        Ok(resolved)
    }

    /// The job event of a submit: the priority inputs it starts with.
    pub(super) fn priority_set_text(&self, spec: &JobSpec) -> String {
        let policy = &self.data.policy;
        let qos = policy.qos.get(&spec.qos).map_or(0, |q| q.priority);
        let account = policy.accounts.get(&spec.account).map_or(0, |a| a.priority);
        let user = policy.users.get(&spec.user).map_or(0, |u| u.priority);
        format!(
            "Priority set (qos: {qos}, account: {account}, user: {user}, nice: {})",
            -i64::from(spec.nice)
        )
    }

    /// Builds the limit re-check for one plan; `None` when the site has no
    /// policy objects (nothing to check).
    pub(super) fn limit_recheck(&self, now_ms: u64) -> Option<LimitRecheck> {
        if self.data.policy.is_empty() {
            return None;
        }
        // Pending jobs are not read: the tally counts what runs.
        let snapshot = self.snapshot_in_apply(false);
        let tally = Tally::new(&snapshot, &Catalog::new(&snapshot), now_ms);
        Some(LimitRecheck { snapshot, tally })
    }

    /// Invariant 3 for limits: the placement passes the same
    /// `limits::check` against what running jobs and the plan's earlier
    /// placements hold, and is charged when it does.
    pub(super) fn limits_allow(
        &self,
        recheck: &mut Option<LimitRecheck>,
        placement: &PlannedStart<'_>,
        borrowed: bool,
    ) -> bool {
        let Some(rc) = recheck.as_mut() else {
            return true;
        };
        let Some(record) = self.data.jobs.get(&placement.job_id) else {
            return false;
        };
        let spec = &record.job.spec;
        let catalog = Catalog::new(&rc.snapshot);
        let account = catalog.account_of(&spec.user, &spec.account);
        let Some(qos) = catalog.qos(catalog.qos_name_of(&spec.qos, account)) else {
            return false;
        };
        let partition = catalog.partition(placement.partition);
        if catalog.partitioned && partition.is_none() {
            return false;
        }
        // The path the plan chose must run in that partition: an
        // alternative naming its own runs there alone.
        let own = spec
            .alternatives
            .get(placement.path)
            .map_or("", |set| set.partition.as_str());
        if !catalog.path_runs_in(&spec.partitions, own, partition) {
            return false;
        }
        let shape = Shape {
            nodes: u32::try_from(placement.hosts.len()).unwrap_or(u32::MAX),
            ..Shape::one(placement.resources)
        };
        let hosts: Vec<&str> = placement.hosts.iter().map(String::as_str).collect();
        let request = LimitRequest {
            user: &spec.user,
            account: account.map_or("", |a| a.name.as_str()),
            qos,
            partition,
            shape: &shape,
            time_limit_s: spec.time_limit_s,
            hosts: Some(&hosts),
            fairshare: None,
            has_reservation: !spec.reservation.is_empty(),
        };
        // A loan (idle-fill) passes every limit but its QOS node cap, and
        // counts toward no quota aggregate, so it is not charged.
        if borrowed {
            return limits::check_lifting_qos_node_cap(
                &request,
                &catalog,
                &rc.tally,
                &rc.snapshot.usage,
            )
            .is_ok();
        }
        if limits::check(&request, &catalog, &rc.tally, &rc.snapshot.usage).is_err() {
            return false;
        }
        rc.tally.charge(&Charge {
            user: &spec.user,
            account: request.account,
            qos: &qos.name,
            partition_qos: partition.map(|p| p.qos.as_str()).filter(|q| !q.is_empty()),
            hosts: &hosts,
            per_host: placement.resources,
            time_limit_s: spec.time_limit_s,
        });
        true
    }

    /// Decays usage to `now_ms` and adds what running jobs used since the
    /// last accrual, or since they started if later (fair share and
    /// `GrpTRESMins`/`GrpWall` read it). Time 0 is a time like any other
    /// (the simulator's clock starts there): usage never accrued has
    /// nothing to decay, and no run is charged before its start.
    pub(super) fn accrue_usage(&mut self, now_ms: u64) {
        let at_ms = self.data.usage.at_ms;
        self.data.usage.at_ms = now_ms.max(at_ms);
        if self.data.policy.accounts.is_empty() || now_ms <= at_ms {
            return;
        }
        let snapshot = self.policy_snapshot();
        let runs = self
            .running
            .iter()
            .filter_map(|id| self.data.jobs.get(id))
            .filter(|r| r.job.state == JobState::Running)
            .filter_map(|r| Some((run_charge(&r.job)?, r.job.borrowed)));
        let usage = accrued(
            &snapshot,
            Accrual {
                at_ms,
                now_ms,
                half_life_s: self.data.policy.decay_half_life_s(),
            },
            runs,
        );
        self.data.usage.usage = usage;
    }

    /// Charges a borrowed run that is ending, from its start to `now_ms`,
    /// at once; a run a reclaim ends is never charged.
    pub(super) fn charge_borrowed_run(&mut self, job_id: JobId, now_ms: u64) {
        let Some(record) = self.data.jobs.get(&job_id) else {
            return;
        };
        let job = &record.job;
        let reclaimed = job
            .evicted
            .as_ref()
            .is_some_and(|m| m.cause == EvictCause::Reclaim);
        let Some(alloc) = &job.alloc else {
            return;
        };
        if !job.borrowed || reclaimed || self.data.policy.accounts.is_empty() {
            return;
        }
        let ran_s = now_ms.saturating_sub(alloc.start_ms) as f64 / 1000.0;
        let snapshot = self.policy_snapshot();
        let catalog = Catalog::new(&snapshot);
        let mut usage = snapshot.usage.clone();
        if let Some((run, _)) = run_charge(job) {
            usage.charge_run(&catalog, &run, ran_s);
        }
        self.data.usage.usage = usage;
    }
}

/// A span of usage accrual: from the last accrual to now, decaying with
/// the half-life.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accrual {
    pub at_ms: u64,
    pub now_ms: u64,
    pub half_life_s: u64,
}

/// `snapshot.usage` decayed over `span` plus what `runs` (each with its
/// start, and whether it runs on borrowed capacity) used in it: the one
/// accrual rule, which `apply` stores and each pass's snapshot projects
/// to the pass's own time. Time 0 is a time like any other (the
/// simulator's clock starts there): usage never accrued has nothing to
/// decay, and no run is charged before its start. A run on borrowed
/// capacity is charged when it ends, and not at all when a reclaim ends
/// it (idle-fill.txt).
pub(crate) fn accrued<'r>(
    snapshot: &Snapshot,
    span: Accrual,
    runs: impl Iterator<Item = ((RunCharge<'r>, u64), bool)>,
) -> Usage {
    let mut usage = snapshot.usage.clone();
    if span.now_ms <= span.at_ms {
        return usage;
    }
    let elapsed_s = (span.now_ms - span.at_ms) as f64 / 1000.0;
    let catalog = Catalog::new(snapshot);
    if span.at_ms > 0 {
        let no_decay: Vec<&str> = snapshot
            .qos
            .iter()
            .filter(|q| q.flags.no_decay)
            .map(|q| q.name.as_str())
            .collect();
        usage.decay(elapsed_s, span.half_life_s, &no_decay);
    }
    for ((run, start_ms), borrowed) in runs {
        if borrowed {
            continue;
        }
        let ran_ms = span.now_ms.saturating_sub(span.at_ms.max(start_ms));
        usage.charge_run(&catalog, &run, ran_ms as f64 / 1000.0);
    }
    usage
}

/// What `job`'s current allocation charges, and since when.
fn run_charge(job: &Job) -> Option<(RunCharge<'_>, u64)> {
    let alloc = job.alloc.as_ref()?;
    let run = RunCharge {
        user: &job.spec.user,
        account: &job.spec.account,
        qos: &job.spec.qos,
        hosts: alloc.hosts().count() as u64,
        per_host: alloc.resources,
    };
    Some((run, alloc.start_ms))
}

/// What a running job's view charges, and since when.
pub(crate) fn view_charge(job: &berth_scheduler::RunningJob) -> ((RunCharge<'_>, u64), bool) {
    let run = RunCharge {
        user: &job.user,
        account: &job.account,
        qos: &job.qos,
        hosts: job.hosts.len() as u64,
        per_host: job.per_host,
    };
    ((run, job.start_ms), job.borrowed)
}

/// A submitted spec as the scheduler sees a pending job: the one rule the
/// cluster's pending views and the simulator's jobs are both built by.
pub fn pending_of(spec: &JobSpec) -> PendingJob {
    PendingJob {
        shape: spec.shape().unwrap_or_else(|_| Shape::one(spec.per_host())),
        // Refused at submit when a set does not parse, so never stored so.
        alternatives: spec.alternative_shapes().unwrap_or_default(),
        path_partitions: if spec.alternatives.iter().all(|a| a.partition.is_empty()) {
            Vec::new()
        } else {
            spec.alternatives
                .iter()
                .map(|a| a.partition.clone())
                .collect()
        },
        held: spec.hold,
        time_limit_s: spec.time_limit_s,
        user: spec.user.clone(),
        account: spec.account.clone(),
        qos: spec.qos.clone(),
        partitions: spec.partitions.clone(),
        nice: spec.nice,
        begin_ms: spec.begin_ms,
        reservation: spec.reservation.clone(),
        preemptible: spec.preemptible,
        ..PendingJob::default()
    }
}
