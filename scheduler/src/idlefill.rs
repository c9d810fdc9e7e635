//! Idle-fill (`idle-fill.txt`): a job whose only obstacle is its QOS group
//! node cap may run on capacity no job with a claim wants. Such a run is
//! *borrowed*: it counts toward no quota aggregate (the limit tally, submit
//! counts, array `%max`, least-served fractions all skip it) and it is
//! reclaimed (`reclaim`) when a job holding a claim needs its hosts.
//!
//! This module holds the four settings and the lending step of a pass:
//! after every in-quota job has started or reserved, the pass offers what
//! is left to the borrow candidates, in queue order, each within its QOS's
//! loan ceiling, now or never (a candidate holds no reservation).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::limits::{self, LimitRequest, Tally};
use crate::partition::Partition;
use crate::pass::{place, take_room, PendingJob, Plan, RunningJob, Snapshot};
use crate::pool::Pool;
use crate::qos::Qos;
use crate::reason::Reason;
use crate::reclaim::{Claimant, Opportunistic};
use crate::usage::Usage;

/// The exempt window never grows past an hour, however often a job was
/// reclaimed.
pub const EXEMPT_WINDOW_MAX_S: u64 = 3_600;

/// Borrow candidates looked at per pass: the bound on the lending step's
/// work (under deep queues lending is the first thing dropped).
pub const BORROW_CANDIDATES_MAX: usize = 1_000;

/// The `[scheduler] idle_fill_*` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdleFill {
    /// The master switch (`idle_fill_enabled`, default false): off, no job
    /// is ever lent capacity or reclaimed.
    pub enabled: bool,
    /// How long a borrowed run is safe from reclaim
    /// (`idle_fill_exempt_secs`, default 60); doubles with each reclaim of
    /// the same job, up to [`EXEMPT_WINDOW_MAX_S`].
    pub exempt_s: u64,
    /// What one QOS may hold on loan, as a multiple of its group node cap
    /// (`idle_fill_max_borrow_factor`; 0 = unbounded).
    pub max_borrow_factor: f64,
    /// What one QOS may hold on loan, as a share of the registered hosts
    /// (`idle_fill_max_cluster_fraction`; 0 = unbounded).
    pub max_cluster_fraction: f64,
}

// The two ratios are checked finite and non-negative where they are read
// (`validate`), so equality is total on the values that exist.
impl Eq for IdleFill {}

impl Default for IdleFill {
    fn default() -> Self {
        IdleFill {
            enabled: false,
            exempt_s: 60,
            max_borrow_factor: 0.0,
            max_cluster_fraction: 0.0,
        }
    }
}

impl IdleFill {
    /// An error naming the setting that is out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.max_borrow_factor.is_finite() && self.max_borrow_factor >= 0.0) {
            return Err(format!(
                "idle_fill_max_borrow_factor must be a number >= 0, not {}",
                self.max_borrow_factor
            ));
        }
        if !(self.max_cluster_fraction.is_finite()
            && (0.0..=1.0).contains(&self.max_cluster_fraction))
        {
            return Err(format!(
                "idle_fill_max_cluster_fraction must be between 0 and 1, not {}",
                self.max_cluster_fraction
            ));
        }
        if self.exempt_s > EXEMPT_WINDOW_MAX_S {
            return Err(format!(
                "idle_fill_exempt_secs must be at most {EXEMPT_WINDOW_MAX_S}, not {}",
                self.exempt_s
            ));
        }
        Ok(())
    }

    /// How long a run reclaimed `reclaims` times before is safe from
    /// reclaim: the window doubles per reclaim, up to an hour.
    pub fn exempt_window_s(&self, reclaims: u32) -> u64 {
        let doubled = if reclaims >= 63 {
            u64::MAX
        } else {
            self.exempt_s.saturating_mul(1u64 << reclaims)
        };
        doubled.min(EXEMPT_WINDOW_MAX_S)
    }

    /// The most hosts one QOS with group node cap `node_cap` may hold on
    /// loan on a cluster of `registered_hosts`; `None` = unbounded. Both
    /// ceilings floor (a ceiling never overshoots) and the tighter wins.
    pub fn loan_ceiling(&self, node_cap: u64, registered_hosts: usize) -> Option<u64> {
        let by_factor = (self.max_borrow_factor > 0.0)
            .then(|| (self.max_borrow_factor * node_cap as f64).floor() as u64);
        let by_fraction = (self.max_cluster_fraction > 0.0)
            .then(|| (self.max_cluster_fraction * registered_hosts as f64).floor() as u64);
        match (by_factor, by_fraction) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The QOS whose group node cap applies to a job in `partition`, with the
/// cap: the partition's QOS first unless the job's QOS has `OverPartQOS`
/// (the precedence `limits` uses), the first that sets `GrpTRES node`.
pub fn capping_qos<'q>(
    catalog: &'q Catalog<'_>,
    job_qos: &'q Qos,
    partition: Option<&Partition>,
) -> Option<(&'q str, u64)> {
    let part_qos = partition
        .filter(|p| !p.qos.is_empty())
        .and_then(|p| catalog.qos(&p.qos));
    let order: [Option<&Qos>; 2] = match part_qos {
        Some(pq) if job_qos.flags.over_part_qos => [Some(job_qos), Some(pq)],
        Some(pq) => [Some(pq), Some(job_qos)],
        None => [Some(job_qos), None],
    };
    order
        .into_iter()
        .flatten()
        .find_map(|q| q.limits.grp_tres.node.map(|cap| (q.name.as_str(), cap)))
}

/// Hosts lent now, by the QOS whose cap the loan is counted against
/// (distinct hosts: two borrowed jobs on one host hold one host on loan).
pub(crate) struct Loans {
    hosts: BTreeMap<String, BTreeSet<String>>,
}

impl Loans {
    pub(crate) fn new(snapshot: &Snapshot, catalog: &Catalog<'_>) -> Loans {
        let mut hosts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in snapshot.running.iter().filter(|r| r.borrowed) {
            if let Some(name) = loan_qos_of_running(r, catalog) {
                hosts
                    .entry(name)
                    .or_default()
                    .extend(r.hosts.iter().cloned());
            }
        }
        Loans { hosts }
    }

    fn held(&self, qos: &str) -> u64 {
        self.hosts.get(qos).map_or(0, |h| h.len() as u64)
    }

    /// Hosts `qos` would hold on loan with `more` added.
    fn held_with(&self, qos: &str, more: &[String]) -> u64 {
        match self.hosts.get(qos) {
            None => more.iter().collect::<BTreeSet<_>>().len() as u64,
            Some(h) => h.len() as u64 + more.iter().filter(|m| !h.contains(*m)).count() as u64,
        }
    }

    fn add(&mut self, qos: &str, more: &[String]) {
        self.hosts
            .entry(qos.to_string())
            .or_default()
            .extend(more.iter().cloned());
    }
}

fn loan_qos_of_running(r: &RunningJob, catalog: &Catalog<'_>) -> Option<String> {
    let account = catalog.account_of(&r.user, &r.account);
    let qos = catalog.qos(catalog.qos_name_of(&r.qos, account))?;
    let partition = catalog.partition(&r.partition);
    capping_qos(catalog, qos, partition).map(|(name, _)| name.to_string())
}

/// Why a job may never be lent capacity, if it may not. Berth's jobs have
/// no heterogeneous components, burst buffers or licenses, so of the four
/// kinds the reference bars only one can occur: a job without a time
/// limit, whose borrowed node would look busy forever to the planner.
pub fn never_lent(job: &PendingJob) -> Option<&'static str> {
    (job.time_limit_s == 0).then_some("it has no time limit")
}

/// What the lending step reads and writes of the pass.
pub(crate) struct LendCtx<'p, 'a> {
    pub snapshot: &'a Snapshot,
    pub catalog: &'p Catalog<'a>,
    pub tally: &'p mut Tally,
    pub pool: &'p mut Pool<'a>,
    pub usage: &'a Usage,
    pub fairshare: &'p dyn Fn(&str) -> Option<f64>,
    pub opportunistic: &'p mut Opportunistic<'a>,
    pub plan: &'p mut Plan,
    pub now_ms: u64,
    pub budget_host_checks: u64,
}

/// Lends idle capacity to the jobs of `waiting` (indices into the
/// snapshot's pending jobs, in queue order) that only their QOS group node
/// cap holds. Each starts now on room no reservation needs, or by
/// reclaiming cheaper opportunistic runs, within its QOS's loan ceiling;
/// otherwise it keeps the reason it has (`QOSGrpNodeLimit`).
pub(crate) fn lend<'a>(policy: &IdleFill, waiting: &[usize], cx: &mut LendCtx<'_, 'a>) {
    let mut loans = Loans::new(cx.snapshot, cx.catalog);
    let registered = cx.snapshot.hosts.len();
    for &idx in waiting.iter().take(BORROW_CANDIDATES_MAX) {
        if cx.pool.host_checks >= cx.budget_host_checks {
            break;
        }
        let job = &cx.snapshot.pending[idx];
        if never_lent(job).is_some() {
            continue;
        }
        if !matches!(cx.plan.reasons.get(&job.id), Some(Reason::Limit(..))) {
            continue;
        }
        match lend_one(policy, job, registered, &loans, cx) {
            Lent::Started(qos, hosts) => {
                loans.add(&qos, &hosts);
                cx.plan.reasons.remove(&job.id);
                cx.plan.details.remove(&job.id);
                cx.plan.borrowed.push(job.id);
            }
            // Its room is being reclaimed from cheaper runs: it borrows it
            // once they have left, and keeps its reason until then.
            Lent::Promised(qos, hosts) => loans.add(&qos, &hosts),
            Lent::No => {}
        }
    }
}

/// What lending did for one candidate: the QOS its loan counts against
/// and the hosts.
enum Lent {
    Started(String, Vec<String>),
    /// Cheaper opportunistic runs are evicted to make the room.
    Promised(String, Vec<String>),
    No,
}

/// Tries `job` on each partition and path.
fn lend_one<'a>(
    policy: &IdleFill,
    job: &'a PendingJob,
    registered: usize,
    loans: &Loans,
    cx: &mut LendCtx<'_, 'a>,
) -> Lent {
    let catalog = cx.catalog;
    let account = catalog.account_of(&job.user, &job.account);
    if account.is_none() && catalog.has_accounts {
        return Lent::No;
    }
    let account_name = account.map_or("", |a| a.name.as_str());
    let Some(qos) = catalog.qos(catalog.qos_name_of(&job.qos, account)) else {
        return Lent::No;
    };
    // Its victims from an earlier pass are still leaving: it waits.
    if cx
        .snapshot
        .running
        .iter()
        .any(|r| r.evicted_for == Some(job.id))
    {
        return Lent::No;
    }
    let partitions: Vec<Option<&Partition>> = if catalog.partitioned {
        catalog.partitions_of(job).into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let duration_ms = Some(job.time_limit_s.saturating_mul(1000));
    let fairshare = (cx.fairshare)(account_name);
    for partition in partitions {
        // Only a job its QOS group node cap holds can borrow.
        let Some((loan_qos, cap)) = capping_qos(catalog, qos, partition) else {
            continue;
        };
        let ceiling = policy.loan_ceiling(cap, registered);
        if ceiling.is_some_and(|c| loans.held(loan_qos) >= c) {
            continue;
        }
        let pname = partition.map(|p| p.name.as_str());
        for (path, shape) in job.paths().iter().enumerate() {
            if !catalog.runs_in(job, path, partition) {
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
            // Eligible only if the node cap is what holds it and nothing
            // else does: every other limit is checked again as usual.
            if limits::check(&request, catalog, cx.tally, cx.usage).is_ok()
                || limits::check_lifting_qos_node_cap(&request, catalog, cx.tally, cx.usage)
                    .is_err()
            {
                continue;
            }
            let kind = cx.pool.kind(shape, pname);
            let classes = cx.pool.eligible_classes(kind, shape);
            if cx.pool.hosts_in(&classes) < shape.hosts_needed() {
                continue;
            }
            let room = match cx
                .pool
                .room_now(shape, &classes, cx.now_ms, duration_ms, None)
            {
                Some(hosts) => Some((hosts, Vec::new())),
                None => cx.opportunistic.find(
                    Claimant::Opportunistic(qos.priority),
                    shape,
                    &classes,
                    duration_ms,
                    cx.pool,
                    cx.now_ms,
                ),
            };
            let Some((hosts, victims)) = room else {
                continue;
            };
            let names = cx.pool.names(&hosts);
            let within = ceiling.is_none_or(|c| loans.held_with(loan_qos, &names) <= c);
            if !within {
                cx.opportunistic.undo(&victims, cx.pool, cx.now_ms);
                continue;
            }
            if victims.is_empty() {
                place(
                    job, shape, partition, path, &hosts, None, cx.tally, cx.pool, cx.plan,
                    cx.now_ms,
                );
                return Lent::Started(loan_qos.to_string(), names);
            }
            // As for a claim (reclaim.rs): the victims keep their room in
            // this pass; the borrower's is promised on top.
            cx.opportunistic.undo(&victims, cx.pool, cx.now_ms);
            cx.opportunistic.commit(&victims, job.id, cx.plan);
            take_room(
                job, shape, partition, &hosts, None, cx.tally, cx.pool, cx.now_ms,
            );
            return Lent::Promised(loan_qos.to_string(), names);
        }
    }
    Lent::No
}

#[cfg(test)]
mod tests;
