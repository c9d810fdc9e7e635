//! Preemption: which running jobs a blocked job may stop, and the fewest of
//! them whose removal lets it start. Two rules make a running job a
//! candidate victim (docs/preemption.md has every choice and why):
//!
//! - **QOS** (Slurm's preempt/qos): the blocked job's own QOS (never a
//!   partition QOS) lists the victim's QOS in `preempt`. The admin's list is
//!   the opt-in; priorities are not compared.
//! - **Priority** (the priority-preemption reference): the victim opted in
//!   (`preemptible`), its priority is below the blocked job's by at least
//!   `gap` (and by at least 1), and it is of the same account or of one the
//!   blocked job's account lists in its `preempt` (empty by default).
//!
//! Either way the victim must have run its exempt time (QOS
//! `preempt_exempt_time_s`, partition QOS before job QOS unless the job QOS
//! has OverPartQOS, else the global `min_runtime_s`), must not sit in a
//! partition whose `preempt_mode` is off, and is stopped the way its QOS
//! (else its partition) says: requeue or cancel; after its QOS GraceTime.
//!
//! The pass fires only at or above `threshold_pct` utilization of the
//! blocked job's hosts. Victims: the fewest units (a gang is one unit,
//! taken whole), lowest priority first, most recently started among
//! equals, and only a set whose removal really lets the job start, by the
//! same availability profiles the pass places with. One victim per blocked
//! job unless `multi_victim`; at most `max_evictions_per_tick` per pass.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::evict::{EvictCause, Eviction};
use crate::fxhash::FxMap;
use crate::model::{JobId, Resources};
use crate::pass::{need_on, PendingJob, Policy, RunningJob, Shape, Snapshot};
use crate::pool::Pool;
use crate::priority;
use crate::qos::{PreemptMode, Qos};

/// Candidates considered for one blocked job's path, best first: the bound
/// on the victim search (the rest are never better, only more).
pub const PREEMPT_CANDIDATES_MAX: usize = 32;
/// Victim sets tried for one blocked job (multi-victim enumerates sets of
/// growing size): the bound on a pass's preemption work per job.
pub const PREEMPT_SETS_TRIED_MAX: usize = 20_000;

/// The preemption knobs (the `[scheduler]` keys of the same names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreemptPolicy {
    /// `preemption_enabled`: off by default.
    pub enabled: bool,
    /// `min_preemption_runtime_s`: the global exempt time (Slurm's global
    /// PreemptExemptTime); a QOS's own takes precedence.
    pub min_runtime_s: u64,
    /// `preemption_gap`: by how much a victim's priority must be below the
    /// blocked job's (priority rule only).
    pub gap: i64,
    /// `preemption_threshold`: percent utilization of the blocked job's
    /// hosts below which nothing is evicted.
    pub threshold_pct: u32,
    /// `preemption_multi_victim`: several victims for one blocked job.
    pub multi_victim: bool,
    /// `max_evictions_per_tick`: evictions per pass, all jobs together.
    pub max_evictions_per_tick: usize,
}

impl Default for PreemptPolicy {
    fn default() -> Self {
        PreemptPolicy {
            enabled: false,
            min_runtime_s: 60,
            gap: 10,
            threshold_pct: 75,
            multi_victim: false,
            max_evictions_per_tick: 1,
        }
    }
}

/// One pass's preemption figures: the metrics the reference names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreemptCounters {
    /// Blocked jobs that looked for victims (utilization at or above the
    /// threshold, eviction budget left).
    pub attempts: u64,
    /// Of those, the ones no allowed victim set lets start.
    pub misses: u64,
    /// Candidates turned down only because their priority was below the
    /// blocked job's by less than the gap.
    pub near_misses: u64,
    /// Victims chosen.
    pub evictions: u64,
    /// Blocked jobs that got victims.
    pub preemptors: u64,
    /// Summed over blocked jobs that got victims: how long each had waited
    /// (since submit or begin time) when they were chosen.
    pub blocked_ms: u64,
}

impl PreemptCounters {
    pub fn is_zero(&self) -> bool {
        *self == PreemptCounters::default()
    }

    pub fn add(&mut self, other: &PreemptCounters) {
        self.attempts += other.attempts;
        self.misses += other.misses;
        self.near_misses += other.near_misses;
        self.evictions += other.evictions;
        self.preemptors += other.preemptors;
        self.blocked_ms += other.blocked_ms;
    }
}

/// How a candidate would be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fate {
    requeue: bool,
    grace_s: u64,
}

/// Whether a running job may be stopped for a blocked one.
enum Verdict {
    Yes(Fate),
    No,
    /// Allowed but for the priority gap: a near miss.
    NearMiss,
}

/// A candidate victim for one blocked job.
struct Candidate {
    running: usize,
    priority: i64,
    start_ms: u64,
    fate: Fate,
    /// (pool host index, room it holds there).
    hosts: Vec<usize>,
}

/// The victims chosen for a blocked job (running index and fate), the
/// path they free room for, and that path's hosts.
type Choice = (Vec<(usize, Fate)>, usize, Vec<usize>);

/// The pass's preemption state: what was evicted so far in this pass and
/// the room promised to the jobs it was evicted for.
pub(crate) struct Preemptor<'a> {
    snapshot: &'a Snapshot,
    policy: &'a Policy,
    fairshare: &'a BTreeMap<String, f64>,
    now_ms: u64,
    /// Running jobs' priorities (age frozen at start), computed the first
    /// time a blocked job looks for victims.
    priorities: Option<Vec<i64>>,
    /// Pool host index -> running jobs on it (indices into
    /// `snapshot.running`), built with `priorities`.
    on_host: FxMap<usize, Vec<usize>>,
    /// Running jobs chosen as victims in this pass.
    taken: Vec<bool>,
    /// Blocked jobs whose victims from an earlier pass are still stopping.
    waiting_for_victims: Vec<JobId>,
    /// Room on a host promised to a job this pass evicted for, and the
    /// victims whose room it counts on: later jobs see neither.
    promised: FxMap<usize, Resources>,
    credited: FxMap<usize, Vec<usize>>,
}

impl<'a> Preemptor<'a> {
    pub fn new(
        snapshot: &'a Snapshot,
        policy: &'a Policy,
        fairshare: &'a BTreeMap<String, f64>,
        now_ms: u64,
    ) -> Preemptor<'a> {
        // Nothing to set up for a pass without preemption (most passes).
        let mut waiting_for_victims: Vec<JobId> = Vec::new();
        if policy.preemption.enabled {
            waiting_for_victims.extend(snapshot.running.iter().filter_map(|r| r.evicted_for));
            waiting_for_victims.sort_unstable();
            waiting_for_victims.dedup();
        }
        Preemptor {
            snapshot,
            policy,
            fairshare,
            now_ms,
            priorities: None,
            on_host: FxMap::default(),
            taken: Vec::new(),
            waiting_for_victims,
            promised: FxMap::default(),
            credited: FxMap::default(),
        }
    }

    /// Looks for victims for `job` (of priority `job_priority`), blocked
    /// only for room on the paths `rooms` ((path, host classes)); adds the
    /// evictions and counters to `plan`.
    pub fn try_for(
        &mut self,
        job: &PendingJob,
        job_priority: i64,
        rooms: &[(usize, &[usize])],
        pool: &mut Pool<'a>,
        catalog: &Catalog<'a>,
        plan: &mut crate::pass::Plan,
    ) {
        let knobs = &self.policy.preemption;
        let budget = knobs
            .max_evictions_per_tick
            .saturating_sub(plan.evictions.len());
        if budget == 0 || rooms.is_empty() {
            return;
        }
        // Its victims are still within their grace: it waits for them.
        if self.waiting_for_victims.binary_search(&job.id).is_ok() {
            return;
        }
        let paths = job.paths();
        let mut pool_hosts: Vec<usize> = rooms
            .iter()
            .flat_map(|(_, classes)| pool.members_of(classes))
            .collect();
        pool_hosts.sort_unstable();
        pool_hosts.dedup();
        let asked = rooms.iter().fold(Resources::default(), |acc, (p, _)| {
            acc.component_max(paths[*p].per_host)
        });
        let exclusive = rooms.iter().any(|(p, _)| paths[*p].exclusive);
        if utilization_pct(pool, &pool_hosts, asked, exclusive) < u64::from(knobs.threshold_pct) {
            return;
        }
        plan.preemption.attempts += 1;
        self.index(pool, catalog);
        let most = if knobs.multi_victim { budget } else { 1 };
        let duration_ms = (job.time_limit_s > 0).then(|| job.time_limit_s.saturating_mul(1000));
        // Running jobs turned down only by the gap, over every path.
        let mut near: Vec<usize> = Vec::new();
        let mut best: Option<Choice> = None;
        for &(path, classes) in rooms {
            let shape = &paths[path];
            let hosts = pool.members_of(classes);
            let (candidates, path_near) = self.candidates(job, job_priority, &hosts, pool, catalog);
            near.extend(path_near);
            // A later path must do with fewer victims to win.
            let limit = best.as_ref().map_or(most, |b| b.0.len().saturating_sub(1));
            if limit == 0 {
                continue;
            }
            if let Some(set) = self.fewest(shape, &hosts, &candidates, limit, duration_ms, pool) {
                let victims = set
                    .iter()
                    .map(|&c| (candidates[c].running, candidates[c].fate))
                    .collect();
                best = Some((victims, path, hosts));
            }
        }
        near.sort_unstable();
        near.dedup();
        plan.preemption.near_misses += near.len() as u64;
        let Some((victims, path, hosts)) = best else {
            plan.preemption.misses += 1;
            return;
        };
        let shape = &paths[path];
        // Promise the job its room on the hosts its victims free, so a
        // later blocked job in this pass does not count on it too.
        for &(v, fate) in &victims {
            self.taken[v] = true;
            let r = &self.snapshot.running[v];
            for name in &r.hosts {
                let Some(i) = pool.index_of(name) else {
                    continue;
                };
                self.credited.entry(i).or_default().push(v);
                if hosts.binary_search(&i).is_ok() {
                    if let Some(need) = need_on(pool.host(i), shape.per_host, shape.exclusive) {
                        let p = self.promised.entry(i).or_default();
                        *p = p.saturating_add(need);
                    }
                }
            }
            plan.evictions.push(Eviction {
                job: r.id,
                for_job: job.id,
                cause: EvictCause::Preempt,
                requeue: fate.requeue,
                alloc_id: r.alloc_id,
                grace_s: fate.grace_s,
            });
            plan.preemption.evictions += 1;
        }
        plan.preemption.preemptors += 1;
        let eligible_ms = job.submit_ms.max(job.begin_ms);
        plan.preemption.blocked_ms += self.now_ms.saturating_sub(eligible_ms);
    }

    /// Computes running jobs' priorities and which run on which host, once.
    fn index(&mut self, pool: &Pool<'a>, catalog: &Catalog<'a>) {
        if self.priorities.is_some() {
            return;
        }
        let now_ms = self.now_ms;
        // A running job's priority is what it had when it started: its age
        // stops growing (Slurm freezes it), so the longer a job has run the
        // more work it would lose, never the less preemptible it becomes.
        let as_pending: Vec<Arc<PendingJob>> = self
            .snapshot
            .running
            .iter()
            .map(|r| {
                let waited_ms = r.start_ms.saturating_sub(r.submit_ms);
                Arc::new(PendingJob {
                    id: r.id,
                    user: r.user.clone(),
                    account: r.account.clone(),
                    qos: r.qos.clone(),
                    partitions: if r.partition.is_empty() {
                        Vec::new()
                    } else {
                        vec![r.partition.clone()]
                    },
                    nice: r.nice,
                    submit_ms: now_ms.saturating_sub(waited_ms),
                    shape: Shape {
                        nodes: u32::try_from(r.hosts.len()).unwrap_or(u32::MAX),
                        per_host: r.per_host,
                        ..Shape::default()
                    },
                    ..PendingJob::default()
                })
            })
            .collect();
        // Only what `priorities` reads: the host count and the accounts.
        let view = Snapshot {
            hosts: self.snapshot.hosts.clone(),
            pending: as_pending,
            accounts: self.snapshot.accounts.clone(),
            ..Snapshot::default()
        };
        let breakdowns = priority::priorities(
            &view,
            catalog,
            &self.policy.priority,
            self.fairshare,
            now_ms,
        );
        self.priorities = Some(breakdowns.iter().map(|b| b.total).collect());
        self.taken = vec![false; self.snapshot.running.len()];
        for (v, r) in self.snapshot.running.iter().enumerate() {
            for name in &r.hosts {
                if let Some(i) = pool.index_of(name) {
                    self.on_host.entry(i).or_default().push(v);
                }
            }
        }
    }

    /// The running jobs on `hosts` that `job` may stop, best first (lowest
    /// priority, then most recently started, then highest id), at most
    /// [`PREEMPT_CANDIDATES_MAX`]; and those that were near misses.
    fn candidates(
        &self,
        job: &PendingJob,
        job_priority: i64,
        hosts: &[usize],
        pool: &Pool<'a>,
        catalog: &Catalog<'a>,
    ) -> (Vec<Candidate>, Vec<usize>) {
        let mut seen: Vec<usize> = hosts
            .iter()
            .filter_map(|i| self.on_host.get(i))
            .flatten()
            .copied()
            .collect();
        seen.sort_unstable();
        seen.dedup();
        let priorities = self.priorities.as_deref().unwrap_or(&[]);
        let mut near = Vec::new();
        let mut out = Vec::new();
        for v in seen {
            if self.taken[v] {
                continue;
            }
            let r = &self.snapshot.running[v];
            let priority = priorities.get(v).copied().unwrap_or(0);
            match self.verdict(job, job_priority, v, priority, catalog) {
                Verdict::No => {}
                Verdict::NearMiss => near.push(v),
                Verdict::Yes(fate) => {
                    let mut on: Vec<usize> =
                        r.hosts.iter().filter_map(|n| pool.index_of(n)).collect();
                    on.sort_unstable();
                    out.push(Candidate {
                        running: v,
                        priority,
                        start_ms: r.start_ms,
                        fate,
                        hosts: on,
                    });
                }
            }
        }
        out.sort_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then(b.start_ms.cmp(&a.start_ms))
                .then(
                    self.snapshot.running[b.running]
                        .id
                        .cmp(&self.snapshot.running[a.running].id),
                )
        });
        out.truncate(PREEMPT_CANDIDATES_MAX);
        (out, near)
    }

    /// How running job `v` would be stopped, if anything may stop it at
    /// all: `None` when its partition's `preempt_mode` is off (a promise
    /// that running jobs there are never kicked out) or its mode is one
    /// this scheduler cannot carry out (suspend).
    fn fate_of(&self, v: usize, catalog: &Catalog<'a>) -> Option<Fate> {
        let r = &self.snapshot.running[v];
        let account = catalog.account_of(&r.user, &r.account);
        let qos = catalog.qos(catalog.qos_name_of(&r.qos, account));
        let partition = catalog.partition(&r.partition);
        if catalog.partitioned && partition.is_none_or(|p| p.preempt_mode == PreemptMode::Off) {
            return None;
        }
        let mode = match qos.map_or(PreemptMode::Off, |q| q.preempt_mode) {
            PreemptMode::Off => partition.map_or(PreemptMode::Requeue, |p| p.preempt_mode),
            set => set,
        };
        let requeue = match mode {
            PreemptMode::Requeue => true,
            PreemptMode::Cancel => false,
            // Refused at config load; a live policy carrying it stops nothing.
            PreemptMode::Suspend | PreemptMode::Off => return None,
        };
        Some(Fate {
            requeue,
            grace_s: qos.and_then(|q| q.grace_time_s).unwrap_or(0),
        })
    }

    fn exempt_s(&self, v: usize, catalog: &Catalog<'a>) -> u64 {
        exempt_s(&self.snapshot.running[v], catalog, &self.policy.preemption)
    }

    fn verdict(
        &self,
        job: &PendingJob,
        job_priority: i64,
        v: usize,
        priority: i64,
        catalog: &Catalog<'a>,
    ) -> Verdict {
        let r: &RunningJob = &self.snapshot.running[v];
        if r.evicted_for.is_some() {
            return Verdict::No;
        }
        let Some(fate) = self.fate_of(v, catalog) else {
            return Verdict::No;
        };
        let ran_ms = self.now_ms.saturating_sub(r.start_ms);
        if ran_ms < self.exempt_s(v, catalog).saturating_mul(1000) {
            return Verdict::No;
        }
        let job_account = catalog.account_of(&job.user, &job.account);
        let job_qos = catalog.qos(catalog.qos_name_of(&job.qos, job_account));
        let victim_account = catalog.account_of(&r.user, &r.account);
        let victim_qos = catalog.qos_name_of(&r.qos, victim_account);
        if job_qos.is_some_and(|q| q.preempt.iter().any(|n| n == victim_qos)) {
            return Verdict::Yes(fate);
        }
        if !r.preemptible {
            return Verdict::No;
        }
        let same_group = match (job_account, victim_account) {
            (Some(a), Some(b)) => {
                a.name == b.name
                    || catalog
                        .lineage(&b.name)
                        .iter()
                        .any(|anc| a.preempt.iter().any(|p| p == anc))
            }
            // A site without accounts is one group.
            (None, None) => !catalog.has_accounts,
            _ => false,
        };
        if !same_group {
            return Verdict::No;
        }
        let below_by = job_priority.saturating_sub(priority);
        if below_by >= self.policy.preemption.gap.max(1) {
            Verdict::Yes(fate)
        } else if below_by > 0 {
            Verdict::NearMiss
        } else {
            Verdict::No
        }
    }

    /// The first set, in order of size and then of preference, of at most
    /// `most` candidates whose removal lets `shape` hold on enough of
    /// `hosts` for `duration_ms` from now. Returns indices into
    /// `candidates`.
    fn fewest(
        &self,
        shape: &Shape,
        hosts: &[usize],
        candidates: &[Candidate],
        most: usize,
        duration_ms: Option<u64>,
        pool: &mut Pool<'a>,
    ) -> Option<Vec<usize>> {
        let wanted = shape.hosts_needed();
        // Hosts that hold it without any new victim (fewer than wanted,
        // or the job would have started).
        let mut base_ok: Vec<usize> = Vec::new();
        for &i in hosts {
            if self.holds(i, shape, &[], candidates, duration_ms, pool) {
                base_ok.push(i);
            }
        }
        let mut tried = 0usize;
        for k in 1..=most.min(candidates.len()) {
            let mut set: Vec<usize> = (0..k).collect();
            loop {
                tried += 1;
                if tried > PREEMPT_SETS_TRIED_MAX {
                    return None;
                }
                if self.set_lets_start(
                    shape,
                    hosts,
                    &base_ok,
                    wanted,
                    &set,
                    candidates,
                    duration_ms,
                    pool,
                ) {
                    return Some(set);
                }
                if !next_combination(&mut set, candidates.len()) {
                    break;
                }
            }
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    fn set_lets_start(
        &self,
        shape: &Shape,
        hosts: &[usize],
        base_ok: &[usize],
        wanted: usize,
        set: &[usize],
        candidates: &[Candidate],
        duration_ms: Option<u64>,
        pool: &mut Pool<'a>,
    ) -> bool {
        let mut touched: Vec<usize> = set
            .iter()
            .flat_map(|&c| candidates[c].hosts.iter().copied())
            .filter(|i| hosts.binary_search(i).is_ok() && base_ok.binary_search(i).is_err())
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let mut ok = base_ok.len();
        for i in touched {
            if self.holds(i, shape, set, candidates, duration_ms, pool) {
                ok += 1;
                if ok >= wanted {
                    return true;
                }
            }
        }
        ok >= wanted
    }

    /// Whether host `i` holds `shape` from now for `duration_ms` once the
    /// candidates `set` and this pass's earlier victims on it are gone,
    /// less the room promised to earlier blocked jobs. Each victim's room
    /// counts until its end by time limit, after which the profile already
    /// has it back.
    fn holds(
        &self,
        i: usize,
        shape: &Shape,
        set: &[usize],
        candidates: &[Candidate],
        duration_ms: Option<u64>,
        pool: &mut Pool<'a>,
    ) -> bool {
        let Some(need) = need_on(pool.host(i), shape.per_host, shape.exclusive) else {
            return false;
        };
        let running = &self.snapshot.running;
        let mut gone: Vec<(Option<u64>, Resources)> = self
            .credited
            .get(&i)
            .map(|vs| {
                vs.iter()
                    .map(|&v| (running[v].end_ms, running[v].per_host))
                    .collect()
            })
            .unwrap_or_default();
        for &c in set {
            if candidates[c].hosts.binary_search(&i).is_ok() {
                let r = &running[candidates[c].running];
                gone.push((r.end_ms, r.per_host));
            }
        }
        let promised = self.promised.get(&i).copied().unwrap_or_default();
        let now_ms = self.now_ms;
        let until_ms = duration_ms.map(|d| now_ms.saturating_add(d));
        // The window splits where a victim would have ended anyway.
        let mut cuts: Vec<u64> = gone
            .iter()
            .filter_map(|g| g.0)
            .filter(|&e| e > now_ms && until_ms.is_none_or(|u| e < u))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut from_ms = now_ms;
        for k in 0..=cuts.len() {
            let to_ms = cuts.get(k).copied().or(until_ms);
            let mut free = pool.min_free(i, from_ms, to_ms);
            for &(end_ms, room) in &gone {
                if end_ms.is_none_or(|e| e > from_ms) {
                    free = free.saturating_add(room);
                }
            }
            if !need.saturating_add(promised).within(free) {
                return false;
            }
            if let Some(t) = cuts.get(k) {
                from_ms = *t;
            }
        }
        // Now, also by what is allocated (the check `apply` repeats).
        let mut free_now = pool
            .host(i)
            .inventory
            .resources()
            .saturating_sub(pool.allocated_now(i));
        for &(_, room) in &gone {
            free_now = free_now.saturating_add(room);
        }
        need.saturating_add(promised).within(free_now)
    }
}

/// How long running job `r` is exempt from preemption after its start:
/// PreemptExemptTime of its partition QOS, else of its own QOS (its own
/// first when it has OverPartQOS), else the global minimum runtime.
pub fn exempt_s(r: &RunningJob, catalog: &Catalog<'_>, knobs: &PreemptPolicy) -> u64 {
    let account = catalog.account_of(&r.user, &r.account);
    let job_qos: Option<&Qos> = catalog.qos(catalog.qos_name_of(&r.qos, account));
    let part_qos: Option<&Qos> = catalog
        .partition(&r.partition)
        .map(|p| p.qos.as_str())
        .filter(|q| !q.is_empty())
        .and_then(|q| catalog.qos(q));
    let own = job_qos.and_then(|q| q.preempt_exempt_time_s);
    let part = part_qos.and_then(|q| q.preempt_exempt_time_s);
    let over = job_qos.is_some_and(|q| q.flags.over_part_qos);
    let qos_time = if over { own.or(part) } else { part.or(own) };
    qos_time.unwrap_or(knobs.min_runtime_s)
}

/// Advances `set` (strictly increasing indices below `n`) to the next
/// combination of its size in lexicographic order; false after the last.
fn next_combination(set: &mut [usize], n: usize) -> bool {
    let k = set.len();
    for pos in (0..k).rev() {
        if set[pos] < n - (k - pos) {
            set[pos] += 1;
            for next in pos + 1..k {
                set[next] = set[next - 1] + 1;
            }
            return true;
        }
    }
    false
}

/// Percent use of `hosts` in the resources the blocked job asks (all of
/// them for an exclusive job): the highest of those, rounded down.
fn utilization_pct(pool: &Pool<'_>, hosts: &[usize], asked: Resources, exclusive: bool) -> u64 {
    let (mut used, mut total) = ([0u64; 4], [0u64; 4]);
    for &i in hosts {
        let t = pool.host(i).inventory.resources();
        let a = pool.allocated_now(i);
        for (k, (u, n)) in [
            (a.cpus as u64, t.cpus as u64),
            (a.mem_mb, t.mem_mb),
            (a.gpus as u64, t.gpus as u64),
            (a.emu as u64, t.emu as u64),
        ]
        .into_iter()
        .enumerate()
        {
            used[k] += u;
            total[k] += n;
        }
    }
    let wanted = [
        asked.cpus > 0,
        asked.mem_mb > 0,
        asked.gpus > 0,
        asked.emu > 0,
    ];
    (0..4)
        .filter(|&k| (exclusive || wanted[k]) && total[k] > 0)
        .map(|k| used[k].min(total[k]) * 100 / total[k])
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::next_combination;
    use crate::evict::{EvictCause, Eviction};
    use crate::model::{Host, Inventory, Resources};
    use crate::pass::{schedule, PendingJob, Policy, RunningJob, Snapshot};

    /// One full host: a preemptible job far below a blocked one.
    fn cluster() -> (Snapshot, Policy) {
        let mut host = Host::new("n1", Inventory::cpu_mem(4, 0));
        host.allocated = Resources::cpu_mem(4, 0);
        let victim = RunningJob {
            id: 1,
            hosts: vec!["n1".into()],
            per_host: Resources::cpu_mem(4, 0),
            end_ms: Some(1_000_000),
            nice: 20,
            preemptible: true,
            alloc_id: 7,
            ..RunningJob::default()
        };
        let mut high = PendingJob::new(2, Resources::cpu_mem(4, 0));
        high.time_limit_s = 100;
        high.submit_ms = 90_000;
        let snapshot = Snapshot {
            hosts: vec![host],
            pending: PendingJob::queue([high]),
            running: vec![victim],
            ..Snapshot::default()
        };
        let mut policy = Policy::default();
        policy.preemption.enabled = true;
        (snapshot, policy)
    }

    #[test]
    fn a_blocked_job_evicts_the_victim_naming_its_allocation() {
        let (snapshot, policy) = cluster();
        let plan = schedule(&snapshot, &policy, 100_000);
        assert_eq!(
            plan.evictions,
            vec![Eviction {
                job: 1,
                for_job: 2,
                cause: EvictCause::Preempt,
                requeue: true,
                alloc_id: 7,
                grace_s: 0,
            }]
        );
        assert_eq!(plan.preemption.attempts, 1);
        assert_eq!(plan.preemption.blocked_ms, 10_000);
        assert!(plan.starts.is_empty());
    }

    #[test]
    fn nothing_is_evicted_while_its_victim_stops_or_when_off() {
        let (mut snapshot, mut policy) = cluster();
        snapshot.running[0].evicted_for = Some(2);
        let plan = schedule(&snapshot, &policy, 100_000);
        assert!(plan.evictions.is_empty());
        assert_eq!(plan.preemption.attempts, 0);
        snapshot.running[0].evicted_for = None;
        policy.preemption.enabled = false;
        let plan = schedule(&snapshot, &policy, 100_000);
        assert!(plan.evictions.is_empty());
        // Within the minimum runtime: a miss, no eviction.
        policy.preemption.enabled = true;
        snapshot.running[0].start_ms = 50_000;
        let plan = schedule(&snapshot, &policy, 100_000);
        assert!(plan.evictions.is_empty());
        assert_eq!(plan.preemption.misses, 1);
    }

    #[test]
    fn combinations_come_in_lexicographic_order() {
        let mut set = vec![0, 1];
        let mut seen = vec![set.clone()];
        while next_combination(&mut set, 4) {
            seen.push(set.clone());
        }
        assert_eq!(
            seen,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
    }
}
