//! Reclaim (`idle-fill.txt`, "Reclaim" and "Priority inside the
//! opportunistic tier"): taking back capacity from opportunistic runs —
//! borrowed runs and runs of a QOS marked `idle_fill_preemptable` — for a
//! job that cannot be placed otherwise.
//!
//! All or nothing: a host counts as recovered only when every job on it is
//! reclaimable by the waiting job, and victims are chosen only when the
//! recovered hosts (with the free ones) really let the job start now, so a
//! job that can never fit evicts nothing. The cheapest host first: hosts
//! are recovered in order of the dearest QOS priority among their runs,
//! and only as many as the job needs. Reclaim ignores `preempt_mode`, the
//! priority gap, preempt lists and `preempt_exempt_time`; its only guard is
//! idle-fill's exempt window. Victims always requeue.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::catalog::Catalog;
use crate::evict::{EvictCause, Eviction};
use crate::fxhash::FxMap;
use crate::idlefill::{IdleFill, LendCtx};
use crate::limits::{self, LimitRequest};
use crate::model::JobId;
use crate::partition::Partition;
use crate::pass::{counts_nodes, take_room, PendingJob, Plan, RunningJob, Shape, Snapshot};
use crate::pool::Pool;

/// Who asks for room, which decides whose runs it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimant {
    /// A job within its quota: it may take any opportunistic run.
    Claim,
    /// A borrower, or a job of an `idle_fill_preemptable` QOS, with its
    /// QOS priority: it may take only runs of a strictly cheaper QOS.
    Opportunistic(i64),
}

/// One opportunistic run.
struct Run<'a> {
    job: &'a RunningJob,
    qos_priority: i64,
    /// Its exempt window has run out.
    exempt_over: bool,
    evicted: bool,
}

/// The opportunistic runs of a pass's snapshot and which hosts they share
/// with which other jobs.
pub(crate) struct Opportunistic<'a> {
    runs: Vec<Run<'a>>,
    /// By index into the snapshot's running jobs: its index in `runs`.
    run_of: Vec<Option<usize>>,
    /// For each host (pool index) some opportunistic run is on: every
    /// running job there (indices into the snapshot's running jobs).
    on_host: FxMap<usize, Vec<usize>>,
    /// Each snapshot running job's hosts as pool indices (only for runs).
    hosts_of: FxMap<usize, Vec<usize>>,
}

impl<'a> Opportunistic<'a> {
    /// Empty when idle-fill is off.
    pub(crate) fn new(
        snapshot: &'a Snapshot,
        catalog: &Catalog<'_>,
        pool: &Pool<'_>,
        policy: &IdleFill,
        now_ms: u64,
    ) -> Opportunistic<'a> {
        let mut found = Opportunistic {
            runs: Vec::new(),
            run_of: vec![None; snapshot.running.len()],
            on_host: FxMap::default(),
            hosts_of: FxMap::default(),
        };
        if !policy.enabled {
            return found;
        }
        for (ri, r) in snapshot.running.iter().enumerate() {
            let account = catalog.account_of(&r.user, &r.account);
            let qos = catalog.qos(catalog.qos_name_of(&r.qos, account));
            let preemptable = qos.is_some_and(|q| q.idle_fill_preemptable);
            // A run already being stopped is no candidate again (it still
            // counts as a job on its hosts, below).
            if (!r.borrowed && !preemptable) || r.evicted_for.is_some() {
                continue;
            }
            let window_ms = policy.exempt_window_s(r.reclaims).saturating_mul(1000);
            found.run_of[ri] = Some(found.runs.len());
            found.runs.push(Run {
                job: r,
                qos_priority: qos.map_or(0, |q| q.priority),
                exempt_over: r.start_ms.saturating_add(window_ms) <= now_ms,
                evicted: false,
            });
            let hosts: Vec<usize> = r.hosts.iter().filter_map(|h| pool.index_of(h)).collect();
            for &h in &hosts {
                found.on_host.entry(h).or_default();
            }
            found.hosts_of.insert(ri, hosts);
        }
        if found.runs.is_empty() {
            return found;
        }
        for (ri, r) in snapshot.running.iter().enumerate() {
            for h in &r.hosts {
                if let Some(list) = pool.index_of(h).and_then(|i| found.on_host.get_mut(&i)) {
                    list.push(ri);
                }
            }
        }
        found
    }

    pub(crate) fn any(&self) -> bool {
        self.runs.iter().any(|r| r.exempt_over && !r.evicted)
    }

    fn takes(&self, claimant: Claimant, ri: usize) -> bool {
        let Some(run) = self.run_of[ri].map(|k| &self.runs[k]) else {
            return false;
        };
        run.exempt_over
            && match claimant {
                Claimant::Claim => true,
                Claimant::Opportunistic(p) => run.qos_priority < p,
            }
    }

    fn evicted(&self, ri: usize) -> bool {
        self.run_of[ri].is_some_and(|k| self.runs[k].evicted)
    }

    /// Hosts of `classes` that `claimant` could recover whole, cheapest
    /// first: by the dearest QOS priority on the host, then the most
    /// recently started run (the least work lost), then name order.
    fn recoverable(&self, claimant: Claimant, classes: &[usize], pool: &Pool<'_>) -> Vec<usize> {
        let members: BTreeSet<usize> = pool.members_of(classes).into_iter().collect();
        let mut hosts: Vec<(i64, Reverse<u64>, usize)> = Vec::new();
        for (&h, jobs) in &self.on_host {
            // A host something was placed on in this pass is not whole.
            if !members.contains(&h) || pool.taken_in_pass(h) {
                continue;
            }
            let live: Vec<usize> = jobs
                .iter()
                .copied()
                .filter(|&ri| !self.evicted(ri))
                .collect();
            if live.is_empty() || !live.iter().all(|&ri| self.takes(claimant, ri)) {
                continue;
            }
            let runs = live
                .iter()
                .filter_map(|&ri| self.run_of[ri].map(|k| &self.runs[k]));
            let dearest = runs.clone().map(|r| r.qos_priority).max().unwrap_or(0);
            let latest = runs.map(|r| r.job.start_ms).max().unwrap_or(0);
            hosts.push((dearest, Reverse(latest), h));
        }
        hosts.sort_unstable();
        hosts.into_iter().map(|(_, _, h)| h).collect()
    }

    /// The fewest cheapest opportunistic runs whose eviction lets `shape`
    /// start now on `classes`, and the hosts it gets: the room of those
    /// runs is given back in `pool` (undo with [`Opportunistic::undo`],
    /// keep with [`Opportunistic::commit`]). `None` leaves `pool` as it was.
    pub(crate) fn find(
        &self,
        claimant: Claimant,
        shape: &Shape,
        classes: &[usize],
        duration_ms: Option<u64>,
        pool: &mut Pool<'_>,
        now_ms: u64,
    ) -> Option<(Vec<usize>, Vec<usize>)> {
        let order = self.recoverable(claimant, classes, pool);
        let mut given: Vec<usize> = Vec::new();
        for h in order {
            for &ri in &self.on_host[&h] {
                if !self.evicted(ri) && !given.contains(&ri) {
                    self.give(ri, pool, now_ms);
                    given.push(ri);
                }
            }
            let Some(hosts) = pool.room_now(shape, classes, now_ms, duration_ms, None) else {
                continue;
            };
            // Keep only the runs on the hosts the job got.
            let (needed, spare): (Vec<usize>, Vec<usize>) = given
                .into_iter()
                .partition(|ri| self.hosts_of[ri].iter().any(|x| hosts.contains(x)));
            self.undo(&spare, pool, now_ms);
            return Some((hosts, needed));
        }
        self.undo(&given, pool, now_ms);
        None
    }

    fn give(&self, ri: usize, pool: &mut Pool<'_>, now_ms: u64) {
        let Some(k) = self.run_of[ri] else { return };
        let job = self.runs[k].job;
        for &h in &self.hosts_of[&ri] {
            pool.give(h, job.per_host, now_ms, job.end_ms);
        }
    }

    /// Takes back the room [`Opportunistic::find`] gave for `victims`.
    pub(crate) fn undo(&self, victims: &[usize], pool: &mut Pool<'_>, now_ms: u64) {
        for &ri in victims {
            let Some(k) = self.run_of[ri] else { continue };
            let job = self.runs[k].job;
            for &h in &self.hosts_of[&ri] {
                pool.retake(h, job.per_host, now_ms, job.end_ms);
            }
        }
    }

    /// Records `victims` as evicted for `for_job`: requeued, always.
    pub(crate) fn commit(&mut self, victims: &[usize], for_job: JobId, plan: &mut Plan) {
        for &ri in victims {
            let Some(k) = self.run_of[ri] else { continue };
            let run = &mut self.runs[k];
            run.evicted = true;
            // Always requeue, and at once: no grace, whatever the QOS says.
            plan.evictions.push(Eviction {
                job: run.job.id,
                for_job,
                cause: EvictCause::Reclaim,
                requeue: true,
                alloc_id: run.job.alloc_id,
                grace_s: 0,
            });
        }
    }
}

/// Recovers room for `job`, which passes its limits but found no room:
/// evicts the opportunistic runs whose hosts let it start now on one of
/// its partitions and paths, and holds that room for it in this pass (it
/// starts once they have left; room freed by evictions goes to the job it
/// was freed for). True when its room is being recovered, now or by an
/// earlier pass's evictions still under way: it then waits for them.
pub(crate) fn reclaim_for<'a>(job: &'a PendingJob, cx: &mut LendCtx<'_, 'a>) -> bool {
    if cx
        .snapshot
        .running
        .iter()
        .any(|r| r.evicted_for == Some(job.id))
    {
        return true;
    }
    let catalog = cx.catalog;
    let account = catalog.account_of(&job.user, &job.account);
    if account.is_none() && catalog.has_accounts {
        return false;
    }
    let account_name = account.map_or("", |a| a.name.as_str());
    let Some(qos) = catalog.qos(catalog.qos_name_of(&job.qos, account)) else {
        return false;
    };
    let claimant = if qos.idle_fill_preemptable {
        Claimant::Opportunistic(qos.priority)
    } else {
        Claimant::Claim
    };
    let partitions: Vec<Option<&Partition>> = if catalog.partitioned {
        catalog.partitions_of(job).into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let duration_ms = (job.time_limit_s > 0).then(|| job.time_limit_s.saturating_mul(1000));
    let fairshare = (cx.fairshare)(account_name);
    for partition in partitions {
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
            let exact = match limits::check(&request, catalog, cx.tally, cx.usage) {
                Ok(()) => false,
                Err(hit) if !hit.never && counts_nodes(&hit.reason) => true,
                Err(_) => continue,
            };
            let kind = cx.pool.kind(shape, pname);
            let classes = cx.pool.eligible_classes(kind, shape);
            if cx.pool.hosts_in(&classes) < shape.hosts_needed() {
                continue;
            }
            let Some((hosts, victims)) =
                cx.opportunistic
                    .find(claimant, shape, &classes, duration_ms, cx.pool, cx.now_ms)
            else {
                continue;
            };
            if exact {
                let names = cx.pool.names(&hosts);
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let on_hosts = LimitRequest {
                    hosts: Some(&refs),
                    ..request
                };
                if limits::check(&on_hosts, catalog, cx.tally, cx.usage).is_err() {
                    cx.opportunistic.undo(&victims, cx.pool, cx.now_ms);
                    continue;
                }
            }
            // The victims hold their room until they have left (the applier
            // stops them after this plan's starts): give it back to them in
            // the pool, so that nothing else is put there in this pass, and
            // promise the job its share on top.
            cx.opportunistic.undo(&victims, cx.pool, cx.now_ms);
            cx.opportunistic.commit(&victims, job.id, cx.plan);
            take_room(
                job,
                shape,
                partition,
                &hosts,
                Some((account_name, qos)),
                cx.tally,
                cx.pool,
                cx.now_ms,
            );
            return true;
        }
    }
    false
}
