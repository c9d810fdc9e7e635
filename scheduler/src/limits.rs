//! QOS and association limits, as Slurm enforces them (`slurm-qos.html`):
//! per-job limits (`MaxTRESPerJob`, `MaxTRESPerNode`, `MaxWall`,
//! `MinTRESPerJob`), group limits (`GrpTRES`, `GrpJobs`, `GrpWall`,
//! `GrpTRESMins`, `MaxTRESPerUser`, `MaxJobsPerUser`), partition limits,
//! and the checks made at submit (`GrpSubmitJobs`, `MaxSubmitJobsPerUser`,
//! `DenyOnLimit`, allowed QOS, nice).
//!
//! Precedence: the partition QOS comes before the job's QOS unless the job's
//! QOS has `OverPartQOS`; both come before the association. For each limit
//! the first of them that sets it decides, and the others' same limit is not
//! looked at (Slurm: a QOS limit overrides the association's). Association
//! group limits hold at the job's account and at every ancestor; its per-job
//! and per-user limits are inherited from the nearest ancestor that sets
//! them, as Slurm copies a parent's limits into child associations.
//!
//! [`check`] is the one function for the pass and for the re-check when a
//! plan is applied (invariant 3). It reads a [`Tally`] of what running jobs
//! hold, built once per pass, and allocates nothing unless a limit is hit.

use std::collections::HashMap;

use crate::catalog::{Catalog, ACCOUNT_DEPTH_MAX};
use crate::fxhash::{same_str, Fx, FxMap};
use crate::model::Resources;
use crate::partition::Partition;
use crate::pass::{PendingJob, RunningJob, Shape, Snapshot};
use crate::qos::{Limits, Qos, TresAmounts, TresKind, TresLimits, NORMAL_QOS};
use crate::reason::{LimitKind, LimitScope, Reason};
use crate::usage::{Usage, UsageRecord};

#[cfg(test)]
mod tests;

/// What a job (on one resource path) asks in TRES, in total over its nodes.
/// An exclusive job counts what it asks here; after placement the pass
/// charges what it really holds.
pub fn job_tres(shape: &Shape) -> TresAmounts {
    let nodes = shape.hosts_needed() as u64;
    per_host_tres(shape.per_host, nodes)
}

/// What `nodes` hosts each holding `per_host` hold in TRES: what a run is
/// counted and charged as, over all its hosts.
pub fn per_host_tres(per_host: Resources, nodes: u64) -> TresAmounts {
    TresAmounts([
        nodes,
        u64::from(per_host.cpus).saturating_mul(nodes),
        per_host.mem_mb.saturating_mul(nodes),
        u64::from(per_host.gpus).saturating_mul(nodes),
        u64::from(per_host.emu).saturating_mul(nodes),
    ])
}

fn per_node(per_host: Resources, kind: TresKind) -> u64 {
    match kind {
        TresKind::Node => 1,
        TresKind::Cpu => u64::from(per_host.cpus),
        TresKind::Mem => per_host.mem_mb,
        TresKind::Gpu => u64::from(per_host.gpus),
        TresKind::Emu => u64::from(per_host.emu),
    }
}

// ---------------------------------------------------------------------------
// Interning. `check` runs for up to 100,000 jobs a pass, so names become
// dense ids once, and groups are keyed by ids with a cheap hasher (the
// default SipHash is several times slower on these short keys).

#[derive(Debug, Default, Clone)]
struct Names {
    ids: HashMap<String, u32, Fx>,
    names: Vec<String>,
}

impl Names {
    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

#[derive(Debug, Clone, Default)]
struct AccountInfo {
    /// `None` under the root (or when the parent is unknown).
    parent: Option<u32>,
    limits: Limits,
    /// Per-job and per-user limits with unset ones taken from the nearest
    /// ancestor that sets them.
    inherited: Limits,
    own_flat: Flat,
    inherited_flat: Flat,
    /// Every limit it or an ancestor sets (lets `check` skip the rest).
    lineage_mask: u64,
}

/// Ids for every name limits are kept under, and the TRES totals that
/// `Relative` QOS limits are percentages of.
#[derive(Debug, Clone, Default)]
struct Registry {
    hosts: Names,
    users: Names,
    qos: Names,
    /// By QOS id: its usage factor (TRESRunMins are booked with it).
    qos_factor: Vec<f64>,
    /// By QOS id: its limits flattened, with the address of the catalog's
    /// `Qos` they came from. `check` uses them only when handed that very
    /// object, so a caller passing another `Qos` never gets stale limits.
    qos_flat: Vec<Option<(usize, Flat)>>,
    accounts: Names,
    account_info: Vec<AccountInfo>,
    partitions: Names,
    /// By partition id: its hosts' TRES, summed only as `cluster` is.
    partition_totals: Vec<TresAmounts>,
    /// By partition id: its partition QOS name ("" = none).
    partition_qos: Vec<String>,
    /// Every host's TRES, summed only when a QOS is `Relative`.
    cluster: TresAmounts,
    /// Whether any QOS or account sets a limit: without one no booking
    /// counts in any group (`Tally::groups_of`), so a tally books none.
    any_limit: bool,
}

fn host_tres(host: &crate::model::Host) -> TresAmounts {
    let r = host.inventory.resources();
    per_host_tres(r, 1)
}

fn fill_tres(dst: &mut TresLimits, src: &TresLimits) {
    for kind in TresKind::ALL {
        if dst.get(kind).is_none() {
            dst.set(kind, src.get(kind));
        }
    }
}

/// Takes from `src` the per-job and per-user limits `dst` leaves unset.
fn inherit_from(dst: &mut Limits, src: &Limits) {
    fill_tres(&mut dst.max_tres_per_job, &src.max_tres_per_job);
    fill_tres(&mut dst.max_tres_per_node, &src.max_tres_per_node);
    fill_tres(&mut dst.max_tres_per_user, &src.max_tres_per_user);
    fill_tres(&mut dst.min_tres_per_job, &src.min_tres_per_job);
    dst.max_jobs_per_user = dst.max_jobs_per_user.or(src.max_jobs_per_user);
    dst.max_submit_jobs_per_user = dst
        .max_submit_jobs_per_user
        .or(src.max_submit_jobs_per_user);
    dst.max_wall_s = dst.max_wall_s.or(src.max_wall_s);
}

impl Registry {
    fn new(snapshot: &Snapshot, catalog: &Catalog) -> Registry {
        let mut reg = Registry::default();
        // Sized once: a `Flat` is 280 bytes, and growing these by doubling
        // took a large allocation every pass.
        reg.qos_factor.reserve_exact(snapshot.qos.len() + 1);
        reg.qos_flat.reserve_exact(snapshot.qos.len() + 1);
        for p in &snapshot.partitions {
            let id = reg.partitions.intern(&p.name) as usize;
            if id == reg.partition_totals.len() {
                reg.partition_totals.push(TresAmounts::default());
                reg.partition_qos.push(p.qos.clone());
            }
        }
        // Host names are interned when a node-counting group books one;
        // a host never booked is occupied by no group. The totals are what
        // `Relative` QOS limits are percentages of: without such a QOS
        // nothing reads them, and summing every host's TRES every pass is
        // a pass's cost on a small cluster.
        let relative = snapshot.qos.iter().any(|q| q.flags.relative);
        for host in snapshot.hosts.iter().filter(|_| relative) {
            let tres = host_tres(host);
            reg.cluster.add(&tres);
            for p in &host.partitions {
                if let Some(id) = reg.partitions.get(p) {
                    reg.partition_totals[id as usize].add(&tres);
                }
            }
        }
        reg.intern_qos(NORMAL_QOS, catalog);
        for q in &snapshot.qos {
            reg.intern_qos(&q.name, catalog);
        }
        for a in &snapshot.accounts {
            reg.accounts.intern(&a.name);
        }
        reg.account_info = reg
            .accounts
            .names
            .iter()
            .map(|name| {
                let account = catalog.account(name);
                AccountInfo {
                    parent: account.and_then(|a| reg.accounts.get(&a.parent)),
                    limits: account.map(|a| a.limits.clone()).unwrap_or_default(),
                    ..AccountInfo::default()
                }
            })
            .collect();
        let root = reg.accounts.get(crate::assoc::ROOT_ACCOUNT);
        for info in &mut reg.account_info {
            if info.parent == root {
                info.parent = None;
            }
        }
        for info in &mut reg.account_info {
            info.own_flat = Flat::of(&info.limits);
        }
        for id in 0..reg.account_info.len() as u32 {
            let mut inherited = Limits::default();
            let mut lineage_mask = 0;
            for a in reg.chain(id) {
                let own = &reg.account_info[a as usize];
                inherit_from(&mut inherited, &own.limits);
                lineage_mask |= own.own_flat.mask;
            }
            let info = &mut reg.account_info[id as usize];
            info.inherited_flat = Flat::of(&inherited);
            info.inherited = inherited;
            info.lineage_mask = lineage_mask;
        }
        reg.any_limit = reg.qos_flat.iter().flatten().any(|(_, f)| f.mask != 0)
            || reg.account_info.iter().any(|a| a.lineage_mask != 0);
        reg
    }

    fn intern_qos(&mut self, name: &str, catalog: &Catalog) -> u32 {
        let id = self.qos.intern(name);
        if id as usize == self.qos_factor.len() {
            let qos = catalog.qos(name);
            self.qos_factor.push(qos.map_or(1.0, |q| q.usage_factor));
            self.qos_flat
                .push(qos.map(|q| (q as *const Qos as usize, Flat::of(&q.limits))));
        }
        id
    }

    fn intern_account(&mut self, name: &str) -> u32 {
        let id = self.accounts.intern(name);
        if id as usize == self.account_info.len() {
            self.account_info.push(AccountInfo::default());
        }
        id
    }

    /// The account and its ancestors below the root, the account first;
    /// bounded so that a cycle in bad input cannot loop.
    fn chain(&self, account: u32) -> Chain<'_> {
        Chain {
            reg: self,
            next: Some(account),
            left: ACCOUNT_DEPTH_MAX,
        }
    }

    fn account(&self, id: u32) -> Option<&AccountInfo> {
        self.account_info.get(id as usize)
    }
}

struct Chain<'r> {
    reg: &'r Registry,
    next: Option<u32>,
    left: usize,
}

impl Iterator for Chain<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let id = self.next?;
        self.next = self.reg.account(id).and_then(|a| a.parent);
        Some(id)
    }
}

// ---------------------------------------------------------------------------
// The tally of what running jobs hold.

/// A limit group: what its usage is counted over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Group {
    Qos(u32),
    QosUser(u32, u32),
    Account(u32),
    AccountUser(u32, u32),
}

#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// `node` is the number of distinct hosts the group occupies.
    tres: TresAmounts,
    jobs: u32,
    /// TRES-minutes its running jobs will still use by their time limits
    /// (Slurm's TRESRunMins), times their QOS usage factor.
    run_mins: [f64; 5],
}

/// Limits read from a group's tally (`GrpWall` reads usage only).
const GROUP_MASK: u64 = 0b11_1111_1111 | 1 << kind_index(LimitKind::GrpJobs);
const USER_MASK: u64 = 0b1_1111 << kind_index(LimitKind::MaxTresPerUser(TresKind::Node))
    | 1 << kind_index(LimitKind::MaxJobsPerUser);
const NODE_GROUP_BIT: u64 = 1 << kind_index(LimitKind::GrpTres(TresKind::Node));
const NODE_USER_BIT: u64 = 1 << kind_index(LimitKind::MaxTresPerUser(TresKind::Node));

/// Adds `group` to `groups` when `mask` sets any limit of `wanted`,
/// counting its hosts when it sets `node_bit`.
fn push_if(groups: &mut Vec<(Group, bool)>, group: Group, mask: u64, wanted: u64, node_bit: u64) {
    if mask & wanted != 0 {
        groups.push((group, mask & node_bit != 0));
    }
}

/// What running jobs (and placements made earlier in this pass) hold, per
/// limit group: per QOS (the job's QOS and its partition's QOS), per (QOS,
/// user), per account and every ancestor, per (account, user); and the
/// cluster's and each partition's TRES totals (for `Relative` QOS).
#[derive(Debug, Clone)]
pub struct Tally {
    reg: Registry,
    held: HashMap<Group, Held, Fx>,
    /// (group, host) -> how many of the group's jobs run on the host: a
    /// group's node count is the number of distinct hosts it occupies.
    occupied: HashMap<(Group, u32), u32, Fx>,
}

/// A placement the pass just made, to add to the [`Tally`].
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    pub user: &'a str,
    /// The resolved account name.
    pub account: &'a str,
    /// The resolved job QOS name.
    pub qos: &'a str,
    /// The partition's QOS, if it has one.
    pub partition_qos: Option<&'a str>,
    pub hosts: &'a [&'a str],
    /// What it holds on each host (the whole host for an exclusive job).
    pub per_host: Resources,
    pub time_limit_s: u64,
}

/// A running job's (user, account, QOS, partition) as it names them,
/// compared with [`same_str`]: most name no QOS.
#[derive(Clone, Copy, Hash)]
struct RunKey<'s>([&'s str; 4]);

impl PartialEq for RunKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.iter().zip(other.0).all(|(a, b)| same_str(a, b))
    }
}

impl Eq for RunKey<'_> {}

/// Whose a booking is: the names its limit groups are found by.
struct Who<'a> {
    user: &'a str,
    account: &'a str,
    qos: &'a str,
    partition_qos: Option<&'a str>,
}

/// The groups a booking counts in (each with whether its distinct hosts
/// are counted), as a range of a list shared by many bookings, and the
/// usage factor its TRES-minutes are booked with.
#[derive(Debug, Clone, Copy)]
struct Counted {
    groups: (usize, usize),
    factor: f64,
}

impl Tally {
    /// O(running jobs × their hosts + hosts).
    pub fn new(snapshot: &Snapshot, catalog: &Catalog, now_ms: u64) -> Tally {
        let mut tally = Tally {
            reg: Registry::new(snapshot, catalog),
            // Sized as they grow: groups are shared by many jobs, and most
            // sites count no group's hosts.
            held: HashMap::default(),
            occupied: HashMap::default(),
        };
        // Without a limit anywhere no job counts in any group.
        if !tally.reg.any_limit {
            return tally;
        }
        // Running jobs of one (user, account, QOS, partition) count in the
        // same groups: the names are resolved and the account tree walked
        // once per such key (a few hundred), not once per job (thousands).
        let mut counted: FxMap<RunKey<'_>, Counted> = FxMap::default();
        let mut groups: Vec<(Group, bool)> = Vec::new();
        // Borrowed runs (idle-fill) sit outside every quota aggregate: a
        // team's lent jobs must not block its next in-quota job.
        for r in snapshot.running.iter().filter(|r| !r.borrowed) {
            let key = RunKey([
                r.user.as_str(),
                r.account.as_str(),
                r.qos.as_str(),
                r.partition.as_str(),
            ]);
            let c = match counted.get(&key) {
                Some(&c) => c,
                None => {
                    let start = groups.len();
                    let factor = tally.groups_of(&running_who(r, catalog), &mut groups);
                    let c = Counted {
                        groups: (start, groups.len()),
                        factor,
                    };
                    counted.insert(key, c);
                    c
                }
            };
            let remaining_s = r
                .end_ms
                .map_or(0.0, |end| end.saturating_sub(now_ms) as f64 / 1000.0);
            let in_groups = groups.get(c.groups.0..c.groups.1).unwrap_or_default();
            tally.add(in_groups, c.factor, r.per_host, remaining_s, &r.hosts);
        }
        tally
    }

    /// Whether any QOS or account sets a limit, so that a placement
    /// [`Tally::charge`]d counts anywhere.
    pub fn books_any(&self) -> bool {
        self.reg.any_limit
    }

    /// Adds a placement the pass just made.
    pub fn charge(&mut self, placed: &Charge<'_>) {
        if !self.reg.any_limit {
            return;
        }
        let who = Who {
            user: placed.user,
            account: placed.account,
            qos: placed.qos,
            partition_qos: placed.partition_qos,
        };
        let mut groups = Vec::new();
        let factor = self.groups_of(&who, &mut groups);
        self.add(
            &groups,
            factor,
            placed.per_host,
            placed.time_limit_s as f64,
            placed.hosts,
        );
    }

    fn qos_id(&mut self, name: &str) -> u32 {
        self.reg.qos.get(name).unwrap_or_else(|| {
            // A QOS the snapshot does not define has no limits to track.
            let id = self.reg.qos.intern(name);
            self.reg.qos_factor.push(1.0);
            self.reg.qos_flat.push(None);
            id
        })
    }

    /// Which limits of QOS `id` need its groups tracked.
    fn qos_mask(&self, id: u32) -> u64 {
        self.reg
            .qos_flat
            .get(id as usize)
            .copied()
            .flatten()
            .map_or(0, |(_, flat)| flat.mask)
    }

    /// Appends to `groups` the groups `who`'s jobs count in, and returns
    /// the usage factor they book TRES-minutes with. Only groups some
    /// limit reads are kept: most QOS and accounts set few limits.
    fn groups_of(&mut self, who: &Who<'_>, groups: &mut Vec<(Group, bool)>) -> f64 {
        let user = self.reg.users.intern(who.user);
        let qos = self.qos_id(who.qos);
        // Slurm books TRESRunMins with the job QOS's usage factor, also in
        // the partition QOS and the association.
        let factor = self
            .reg
            .qos_factor
            .get(qos as usize)
            .copied()
            .unwrap_or(1.0);
        let qos_groups = |tally: &Tally, q: u32, groups: &mut Vec<(Group, bool)>| {
            let mask = tally.qos_mask(q);
            push_if(groups, Group::Qos(q), mask, GROUP_MASK, NODE_GROUP_BIT);
            push_if(
                groups,
                Group::QosUser(q, user),
                mask,
                USER_MASK,
                NODE_USER_BIT,
            );
        };
        qos_groups(self, qos, groups);
        if let Some(pq) = who.partition_qos.filter(|pq| *pq != who.qos) {
            let pq = self.qos_id(pq);
            qos_groups(self, pq, groups);
        }
        if !who.account.is_empty() {
            let account = self.reg.intern_account(who.account);
            for a in self.reg.chain(account) {
                let mask = self.reg.account(a).map_or(0, |i| i.own_flat.mask);
                push_if(groups, Group::Account(a), mask, GROUP_MASK, NODE_GROUP_BIT);
            }
            let mask = self
                .reg
                .account(account)
                .map_or(0, |i| i.inherited_flat.mask);
            push_if(
                groups,
                Group::AccountUser(account, user),
                mask,
                USER_MASK,
                NODE_USER_BIT,
            );
        }
        factor
    }

    /// Adds a job holding `per_host` on each of `hosts` (by name) for
    /// `remaining_s` more seconds (0 = unknown) to each of `groups`. Host
    /// names are interned only for groups that count distinct nodes: most
    /// sites have none, and this runs for every running job each pass.
    fn add<S: AsRef<str>>(
        &mut self,
        groups: &[(Group, bool)],
        factor: f64,
        per_host: Resources,
        remaining_s: f64,
        hosts: &[S],
    ) {
        let mut tres = per_host_tres(per_host, hosts.len() as u64);
        let mut run_mins = [0.0; 5];
        for kind in TresKind::ALL {
            run_mins[kind.index()] = tres.get(kind) as f64 * remaining_s / 60.0 * factor;
        }
        tres.set(TresKind::Node, 0);
        for &(group, nodes) in groups {
            let held = self.held.entry(group).or_default();
            held.jobs = held.jobs.saturating_add(1);
            held.tres.add(&tres);
            for (a, b) in held.run_mins.iter_mut().zip(run_mins) {
                *a += b;
            }
            if !nodes {
                continue;
            }
            for name in hosts {
                let host = self.reg.hosts.intern(name.as_ref());
                let count = self.occupied.entry((group, host)).or_insert(0);
                *count += 1;
                if *count == 1 {
                    let nodes = held.tres.get(TresKind::Node);
                    held.tres.set(TresKind::Node, nodes + 1);
                }
            }
        }
    }
}

/// Whose running job `r` is, its account and QOS resolved as a pending
/// job's would be.
fn running_who<'r>(r: &'r RunningJob, catalog: &Catalog<'r>) -> Who<'r> {
    let account = if r.account.is_empty() {
        catalog.account_of(&r.user, "")
    } else {
        catalog.account(&r.account)
    };
    Who {
        user: &r.user,
        account: account.map_or(r.account.as_str(), |a| a.name.as_str()),
        qos: catalog.qos_name_of(&r.qos, account),
        partition_qos: catalog
            .partition(&r.partition)
            .map(|p| p.qos.as_str())
            .filter(|q| !q.is_empty()),
    }
}

// ---------------------------------------------------------------------------
// The check.

/// One limit that holds a job.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitHit {
    pub reason: Reason,
    /// One sentence with the numbers, e.g. `gpus 12 in use + 8 asked > 16
    /// (QOS team GrpTRES)`.
    pub detail: String,
    /// The job could not run even with nothing else running in the group:
    /// it waits until the limit is raised.
    pub never: bool,
}

/// Everything [`check`] needs to know about one job on one resource path.
#[derive(Debug, Clone, Copy)]
pub struct LimitRequest<'a> {
    pub user: &'a str,
    /// The resolved account name.
    pub account: &'a str,
    /// The resolved job QOS.
    pub qos: &'a Qos,
    /// The partition it would run in (its QOS is looked up in the catalog).
    pub partition: Option<&'a Partition>,
    pub shape: &'a Shape,
    /// 0 = none (the caller resolves the partition's default first).
    pub time_limit_s: u64,
    /// The hosts it would land on, if known: node limits then count only
    /// hosts the group does not occupy already. `None`: every node is new.
    pub hosts: Option<&'a [&'a str]>,
    /// Its account's fair-share factor (for `UsageThreshold`), if computed.
    pub fairshare: Option<f64>,
    pub has_reservation: bool,
}

/// Everything a job's placement must satisfy: the partition's limits, the
/// job QOS's `RequiresReservation`, then the QOS and association limits in
/// precedence order. When several limits hold a job, one it could never
/// satisfy is reported before one that only waits for others to end.
pub fn check(
    req: &LimitRequest<'_>,
    catalog: &Catalog,
    tally: &Tally,
    usage: &Usage,
) -> Result<(), LimitHit> {
    check_with(req, catalog, tally, usage, false)
}

/// [`check`] with the QOS group node cap (`GrpTRES node` of the job's or
/// the partition's QOS) lifted and every other limit enforced: idle-fill's
/// eligibility test (`idle-fill.txt`, "Which jobs may borrow"). A job over
/// its node cap and another limit fails it; reading only the first breach
/// a job reports would miss the second.
pub fn check_lifting_qos_node_cap(
    req: &LimitRequest<'_>,
    catalog: &Catalog,
    tally: &Tally,
    usage: &Usage,
) -> Result<(), LimitHit> {
    check_with(req, catalog, tally, usage, true)
}

fn check_with(
    req: &LimitRequest<'_>,
    catalog: &Catalog,
    tally: &Tally,
    usage: &Usage,
    lift_qos_node_cap: bool,
) -> Result<(), LimitHit> {
    if let Some(p) = req.partition {
        check_partition(req.shape, req.time_limit_s, p, req.qos)?;
    }
    if req.qos.flags.requires_reservation && !req.has_reservation {
        return Err(LimitHit {
            reason: Reason::InvalidQos,
            detail: format!(
                "QOS {} requires a reservation and the job names none",
                req.qos.name
            ),
            never: true,
        });
    }
    let reg = &tally.reg;
    let scopes = Scopes::resolve(reg, catalog, req.qos, req.partition, req.account);
    let mask = scopes.mask(reg);
    if mask == 0 && !scopes.usage_threshold_applies() {
        return Ok(());
    }
    let job = JobView {
        // Only per-user limits read the user's groups.
        user: if mask & USER_MASK != 0 {
            reg.users.get(req.user)
        } else {
            None
        },
        shape: req.shape,
        asked: job_tres(req.shape),
        time_limit_s: req.time_limit_s,
        hosts: req.hosts,
        fairshare: req.fairshare,
    };
    let eval = Eval {
        reg,
        live: Some(Live { tally, usage }),
        job: &job,
        scopes: &scopes,
        mask,
        lift_qos_node_cap,
    };
    let mut first: Option<Hit> = None;
    let mut never: Option<Hit> = None;
    eval.run(&mut |hit| {
        if hit.never {
            never = Some(hit);
            return true;
        }
        first.get_or_insert(hit);
        false
    });
    match never.or(first) {
        None => Ok(()),
        Some(hit) => Err(render(&hit, reg, &scopes, req.user)),
    }
}

/// Partition limits: a time limit over the partition's `max_time_s`
/// (unless the job's QOS has `PartitionTimeLimit`), a node count outside
/// `min_nodes..=max_nodes` (unless `PartitionMinNodes` /
/// `PartitionMaxNodes`). Each is `never`: the job waits until the
/// partition changes. A time limit of 0 (none) is not checked: the caller
/// gives such a job the partition's default first.
pub fn check_partition(
    shape: &Shape,
    time_limit_s: u64,
    partition: &Partition,
    qos: &Qos,
) -> Result<(), LimitHit> {
    let hit = |reason, detail| {
        Err(LimitHit {
            reason,
            detail,
            never: true,
        })
    };
    if let Some(max) = partition.max_time_s {
        if time_limit_s > max && !qos.flags.partition_time_limit {
            return hit(
                Reason::PartitionTimeLimit,
                format!(
                    "time limit {time_limit_s} s > {max} s (partition {} MaxTime)",
                    partition.name
                ),
            );
        }
    }
    let nodes = shape.hosts_needed() as u64;
    if let Some(max) = partition.max_nodes {
        if nodes > u64::from(max) && !qos.flags.partition_max_nodes {
            return hit(
                Reason::PartitionNodeLimit,
                format!(
                    "nodes {nodes} > {max} (partition {} MaxNodes)",
                    partition.name
                ),
            );
        }
    }
    if let Some(min) = partition.min_nodes {
        if nodes < u64::from(min) && !qos.flags.partition_min_nodes {
            return hit(
                Reason::PartitionNodeLimit,
                format!(
                    "nodes {nodes} < {min} (partition {} MinNodes)",
                    partition.name
                ),
            );
        }
    }
    Ok(())
}

/// A QOS's limits flattened: the registry's copy when it was made from
/// this very `Qos` (every check in a pass), else made for this check. A
/// reference, not a copy: `Flat` is 280 bytes and `check` runs for every
/// job of a pass.
enum FlatRef<'a> {
    Registry(&'a Flat),
    Own(Box<Flat>),
}

impl std::ops::Deref for FlatRef<'_> {
    type Target = Flat;

    fn deref(&self) -> &Flat {
        match self {
            FlatRef::Registry(flat) => flat,
            FlatRef::Own(flat) => flat,
        }
    }
}

/// One QOS whose limits apply, with what `Relative` limits are relative to.
struct QosScope<'a> {
    qos: &'a Qos,
    flat: FlatRef<'a>,
    id: Option<u32>,
    /// Set when it is the partition's QOS.
    partition: Option<&'a str>,
    /// The totals `Relative` percentages are of (the partition's when it is
    /// that partition's QOS, else the cluster's).
    base: TresAmounts,
}

impl QosScope<'_> {
    fn effective(&self, kind: LimitKind, value: u64) -> u64 {
        match (self.qos.flags.relative, tres_of(kind)) {
            (true, Some(tres)) => {
                let pct = u128::from(value.min(100));
                (u128::from(self.base.get(tres)) * pct / 100) as u64
            }
            _ => value,
        }
    }
}

/// The scopes whose limits apply to a job, in precedence order.
struct Scopes<'a> {
    qos: [Option<QosScope<'a>>; 2],
    /// Index in `qos` of the job's own QOS (its usage factor and
    /// `UsageFactorSafe` apply).
    job_qos: usize,
    account: Option<u32>,
}

impl<'a> Scopes<'a> {
    fn resolve(
        reg: &'a Registry,
        catalog: &'a Catalog,
        job_qos: &'a Qos,
        partition: Option<&'a Partition>,
        account: &str,
    ) -> Scopes<'a> {
        let scope = |qos: &'a Qos, part: Option<&'a Partition>| {
            let base = match (qos.flags.relative, part) {
                (false, _) => TresAmounts::default(),
                (true, Some(p)) => reg
                    .partitions
                    .get(&p.name)
                    .and_then(|id| reg.partition_totals.get(id as usize).copied())
                    .unwrap_or(reg.cluster),
                (true, None) => reg.cluster,
            };
            let id = reg.qos.get(&qos.name);
            let cached = id
                .and_then(|id| reg.qos_flat.get(id as usize))
                .and_then(Option::as_ref)
                .filter(|(addr, _)| *addr == qos as *const Qos as usize);
            QosScope {
                qos,
                flat: match cached {
                    Some((_, flat)) => FlatRef::Registry(flat),
                    None => FlatRef::Own(Box::new(Flat::of(&qos.limits))),
                },
                id,
                partition: part.map(|p| p.name.as_str()),
                base,
            }
        };
        let part_qos = partition
            .filter(|p| !p.qos.is_empty())
            .and_then(|p| catalog.qos(&p.qos).map(|q| (p, q)));
        let (qos, job_qos_at) = match part_qos {
            Some((p, pq)) if pq.name == job_qos.name => ([Some(scope(job_qos, Some(p))), None], 0),
            Some((p, pq)) if job_qos.flags.over_part_qos => {
                ([Some(scope(job_qos, None)), Some(scope(pq, Some(p)))], 0)
            }
            Some((p, pq)) => ([Some(scope(pq, Some(p))), Some(scope(job_qos, None))], 1),
            None => ([Some(scope(job_qos, None)), None], 0),
        };
        Scopes {
            qos,
            job_qos: job_qos_at,
            account: reg.accounts.get(account),
        }
    }

    fn qos_scopes(&self) -> impl Iterator<Item = (usize, &QosScope<'a>)> {
        self.qos
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    /// Every limit any scope sets.
    fn mask(&self, reg: &Registry) -> u64 {
        let qos = self.qos_scopes().fold(0, |m, (_, s)| m | s.flat.mask);
        let account = self
            .account
            .and_then(|a| reg.account(a))
            .map_or(0, |a| a.lineage_mask);
        qos | account
    }

    fn usage_threshold_applies(&self) -> bool {
        self.qos_scopes()
            .any(|(_, s)| s.qos.flags.enforce_usage_threshold && s.qos.usage_threshold.is_some())
    }

    /// The first QOS scope that sets `kind`, with its effective value.
    fn qos_decides(&self, kind: LimitKind, index: usize) -> Option<(usize, u64)> {
        self.qos_scopes()
            .find_map(|(i, s)| s.flat.get(index).map(|v| (i, s.effective(kind, v))))
    }

    fn job_qos(&self) -> Option<&QosScope<'a>> {
        self.qos[self.job_qos].as_ref()
    }
}

/// The value of one limit in a [`Limits`] set.
fn limit_of(l: &Limits, kind: LimitKind) -> Option<u64> {
    use LimitKind as K;
    match kind {
        K::GrpTres(k) => l.grp_tres.get(k),
        K::GrpTresMins(k) => l.grp_tres_mins.get(k),
        K::GrpJobs => l.grp_jobs.map(u64::from),
        K::GrpWall => l.grp_wall_s,
        K::MaxTresPerJob(k) => l.max_tres_per_job.get(k),
        K::MaxTresPerNode(k) => l.max_tres_per_node.get(k),
        K::MaxTresPerUser(k) => l.max_tres_per_user.get(k),
        K::MaxJobsPerUser => l.max_jobs_per_user.map(u64::from),
        K::MaxWall => l.max_wall_s,
        K::MinTresPerJob(k) => l.min_tres_per_job.get(k),
        K::UsageThreshold => None,
    }
}

/// The TRES a limit is written in (what `Relative` scales).
fn tres_of(kind: LimitKind) -> Option<TresKind> {
    use LimitKind as K;
    match kind {
        K::GrpTres(k)
        | K::GrpTresMins(k)
        | K::MaxTresPerJob(k)
        | K::MaxTresPerNode(k)
        | K::MaxTresPerUser(k)
        | K::MinTresPerJob(k) => Some(k),
        _ => None,
    }
}

/// Limits an association inherits from its ancestors (the others hold at
/// each level separately).
fn inherited_kind(kind: LimitKind) -> bool {
    use LimitKind as K;
    matches!(
        kind,
        K::MaxTresPerJob(_)
            | K::MaxTresPerNode(_)
            | K::MaxTresPerUser(_)
            | K::MaxJobsPerUser
            | K::MaxWall
            | K::MinTresPerJob(_)
    )
}

fn per_user_kind(kind: LimitKind) -> bool {
    matches!(
        kind,
        LimitKind::MaxTresPerUser(_) | LimitKind::MaxJobsPerUser
    )
}

/// Slurm's name of a limit, as written in reason sentences.
fn limit_name(kind: LimitKind) -> &'static str {
    use LimitKind as K;
    match kind {
        K::GrpTres(_) => "GrpTRES",
        K::GrpTresMins(_) => "GrpTRESMins",
        K::GrpJobs => "GrpJobs",
        K::GrpWall => "GrpWall",
        K::MaxTresPerJob(_) => "MaxTRESPerJob",
        K::MaxTresPerNode(_) => "MaxTRESPerNode",
        K::MaxTresPerUser(_) => "MaxTRESPerUser",
        K::MaxJobsPerUser => "MaxJobsPerUser",
        K::MaxWall => "MaxWall",
        K::MinTresPerJob(_) => "MinTRESPerJob",
        K::UsageThreshold => "UsageThreshold",
    }
}

/// How many limits [`Flat`] holds (every [`LimitKind`] but
/// `UsageThreshold`).
const KINDS: usize = 34;

/// A dense index for each limit, for [`Flat`].
const fn kind_index(kind: LimitKind) -> usize {
    use LimitKind as K;
    match kind {
        K::GrpTres(k) => k as usize,
        K::GrpTresMins(k) => 5 + k as usize,
        K::MaxTresPerJob(k) => 10 + k as usize,
        K::MaxTresPerNode(k) => 15 + k as usize,
        K::MaxTresPerUser(k) => 20 + k as usize,
        K::MinTresPerJob(k) => 25 + k as usize,
        K::GrpJobs => 30,
        K::GrpWall => 31,
        K::MaxJobsPerUser => 32,
        K::MaxWall | K::UsageThreshold => 33,
    }
}

/// The five limits of one TRES-valued kind, in [`TresKind::ALL`] order.
macro_rules! per_tres {
    ($kind:path) => {
        [
            $kind(TresKind::Node),
            $kind(TresKind::Cpu),
            $kind(TresKind::Mem),
            $kind(TresKind::Gpu),
            $kind(TresKind::Emu),
        ]
    };
}

/// Every limit a [`Flat`] holds, in index order.
const FLAT_KINDS: [LimitKind; KINDS] = {
    let groups = [
        per_tres!(LimitKind::GrpTres),
        per_tres!(LimitKind::GrpTresMins),
        per_tres!(LimitKind::MaxTresPerJob),
        per_tres!(LimitKind::MaxTresPerNode),
        per_tres!(LimitKind::MaxTresPerUser),
        per_tres!(LimitKind::MinTresPerJob),
    ];
    let mut all = [LimitKind::MaxWall; KINDS];
    let mut g = 0;
    while g < 6 {
        let mut k = 0;
        while k < 5 {
            all[g * 5 + k] = groups[g][k];
            k += 1;
        }
        g += 1;
    }
    all[30] = LimitKind::GrpJobs;
    all[31] = LimitKind::GrpWall;
    all[32] = LimitKind::MaxJobsPerUser;
    all[33] = LimitKind::MaxWall;
    all
};

/// Limits `check` looks at: all of [`FLAT_KINDS`] but node-per-node.
const CHECKED: usize = KINDS - 1;

/// The order limits are checked in (with their [`kind_index`]): per-job
/// limits first, as a job that breaks one can never run; then group
/// limits; usage-based ones last. A node count per node means nothing, so
/// `MaxTRESPerNode` skips `node`.
const CHECK_ORDER: [(LimitKind, usize); CHECKED] = {
    use LimitKind as K;
    let order = [
        [K::MaxWall; 1].as_slice(),
        per_tres!(K::MaxTresPerJob).as_slice(),
        per_tres!(K::MaxTresPerNode).split_at(1).1,
        per_tres!(K::MinTresPerJob).as_slice(),
        per_tres!(K::GrpTres).as_slice(),
        [K::GrpJobs; 1].as_slice(),
        per_tres!(K::MaxTresPerUser).as_slice(),
        [K::MaxJobsPerUser; 1].as_slice(),
        [K::GrpWall; 1].as_slice(),
        per_tres!(K::GrpTresMins).as_slice(),
    ];
    let mut all = [(K::MaxWall, 0); CHECKED];
    let mut n = 0;
    let mut i = 0;
    while i < order.len() {
        let mut j = 0;
        while j < order[i].len() {
            all[n] = (order[i][j], kind_index(order[i][j]));
            n += 1;
            j += 1;
        }
        i += 1;
    }
    // A wrong count fails the build rather than leaving unchecked slots.
    assert!(n == CHECKED);
    all
};

/// Each limit's place in [`CHECK_ORDER`], by [`kind_index`] (`None` for
/// the one not checked, node-per-node).
const CHECK_PLACE: [Option<u8>; KINDS] = {
    let mut place = [None; KINDS];
    let mut n = 0;
    while n < CHECKED {
        place[CHECK_ORDER[n].1] = Some(n as u8);
        n += 1;
    }
    place
};

/// `mask` (a bit per [`kind_index`]) as a bit per place in
/// [`CHECK_ORDER`]: a check then visits the few limits its scopes set, in
/// order, rather than testing all of them (it runs for every job of a
/// pass, and most scopes set two or three limits).
fn in_check_order(mask: u64) -> u64 {
    let mut placed = 0u64;
    let mut rest = mask;
    while rest != 0 {
        let index = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        if let Some(Some(place)) = CHECK_PLACE.get(index) {
            placed |= 1 << place;
        }
    }
    placed
}

fn is_per_job(kind: LimitKind) -> bool {
    matches!(
        kind,
        LimitKind::MaxWall
            | LimitKind::MaxTresPerJob(_)
            | LimitKind::MaxTresPerNode(_)
            | LimitKind::MinTresPerJob(_)
    )
}

/// A [`Limits`] set as a dense array with a mask of the limits it sets, so
/// that `check` visits only those.
#[derive(Debug, Clone, Copy)]
struct Flat {
    values: [u64; KINDS],
    mask: u64,
}

impl Default for Flat {
    fn default() -> Self {
        Flat {
            values: [0; KINDS],
            mask: 0,
        }
    }
}

impl Flat {
    fn of(limits: &Limits) -> Flat {
        let mut flat = Flat::default();
        for (i, kind) in FLAT_KINDS.into_iter().enumerate() {
            if let Some(v) = limit_of(limits, kind) {
                flat.values[i] = v;
                flat.mask |= 1 << i;
            }
        }
        flat
    }

    fn get(&self, index: usize) -> Option<u64> {
        (self.mask & (1 << index) != 0).then(|| self.values[index])
    }
}

/// Which scope's limit holds the job.
#[derive(Debug, Clone, Copy, PartialEq)]
enum At {
    /// Index into `Scopes::qos`.
    Qos(usize),
    /// The account whose limit it is (for inherited limits, the job's own
    /// account; the sentence names the ancestor that sets it).
    Account(u32),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Hit {
    at: At,
    kind: LimitKind,
    used: f64,
    asked: f64,
    limit: f64,
    never: bool,
    /// Held because usage alone reached the limit (`used >= limit`).
    at_least: bool,
}

struct JobView<'a> {
    user: Option<u32>,
    shape: &'a Shape,
    asked: TresAmounts,
    time_limit_s: u64,
    hosts: Option<&'a [&'a str]>,
    fairshare: Option<f64>,
}

struct Live<'a> {
    tally: &'a Tally,
    usage: &'a Usage,
}

/// One evaluation of every limit for one job. Without `live` every group
/// is taken as empty: the job is judged alone (`DenyOnLimit`).
struct Eval<'a> {
    reg: &'a Registry,
    live: Option<Live<'a>>,
    job: &'a JobView<'a>,
    scopes: &'a Scopes<'a>,
    /// Every limit any scope sets: the others are not looked at.
    mask: u64,
    /// A QOS's `GrpTRES node` is not enforced (idle-fill eligibility).
    lift_qos_node_cap: bool,
}

const NO_HELD: Held = Held {
    tres: TresAmounts([0; 5]),
    jobs: 0,
    run_mins: [0.0; 5],
};

impl Eval<'_> {
    /// Calls `sink` with each hit in check order until it returns true.
    fn run(&self, sink: &mut dyn FnMut(Hit) -> bool) {
        let mut todo = in_check_order(self.mask);
        while todo != 0 {
            let place = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            let (kind, index) = CHECK_ORDER[place];
            let stop = if is_per_job(kind) {
                self.per_job(kind, index, sink)
            } else {
                self.group(kind, index, sink)
            };
            if stop {
                return;
            }
        }
        self.usage_threshold(sink);
    }

    /// The deciding scope of a per-job or per-user limit and its value.
    fn decide_single(&self, kind: LimitKind, index: usize) -> Option<(At, u64)> {
        if let Some((i, v)) = self.scopes.qos_decides(kind, index) {
            return Some((At::Qos(i), v));
        }
        let account = self.scopes.account?;
        let info = self.reg.account(account)?;
        info.inherited_flat
            .get(index)
            .map(|v| (At::Account(account), v))
    }

    fn per_job(&self, kind: LimitKind, index: usize, sink: &mut dyn FnMut(Hit) -> bool) -> bool {
        use LimitKind as K;
        let Some((at, limit)) = self.decide_single(kind, index) else {
            return false;
        };
        let job = self.job;
        let (asked, over) = match kind {
            K::MaxWall => (job.time_limit_s, job.time_limit_s > limit),
            K::MaxTresPerJob(k) => (job.asked.get(k), job.asked.get(k) > limit),
            K::MaxTresPerNode(k) => {
                let v = per_node(job.shape.per_host, k);
                (v, v > limit)
            }
            K::MinTresPerJob(k) => (job.asked.get(k), job.asked.get(k) < limit),
            _ => return false,
        };
        over && sink(Hit {
            at,
            kind,
            used: 0.0,
            asked: asked as f64,
            limit: limit as f64,
            never: true,
            at_least: false,
        })
    }

    fn held(&self, group: Option<Group>) -> &Held {
        match (&self.live, group) {
            (Some(live), Some(g)) => live.tally.held.get(&g).unwrap_or(&NO_HELD),
            _ => &NO_HELD,
        }
    }

    /// Nodes the job adds to `group`: only hosts it does not occupy yet.
    fn new_nodes(&self, group: Option<Group>) -> u64 {
        match (&self.live, self.job.hosts, group) {
            (Some(live), Some(hosts), Some(g)) => hosts
                .iter()
                .filter(|h| {
                    self.reg
                        .hosts
                        .get(h)
                        .is_none_or(|slot| !live.tally.occupied.contains_key(&(g, slot)))
                })
                .count() as u64,
            (_, Some(hosts), _) => hosts.len() as u64,
            _ => self.job.asked.get(TresKind::Node),
        }
    }

    fn usage_record(&self, at: At) -> Option<&UsageRecord> {
        let usage = self.live.as_ref()?.usage;
        match at {
            At::Qos(i) => usage.qos.get(&self.scopes.qos[i].as_ref()?.qos.name),
            At::Account(a) => usage.accounts.get(self.reg.accounts.name(a)),
        }
    }

    fn group_of(&self, at: At, kind: LimitKind) -> Option<Group> {
        let per_user = per_user_kind(kind);
        match at {
            At::Qos(i) => {
                let q = self.scopes.qos[i].as_ref()?.id?;
                if per_user {
                    Some(Group::QosUser(q, self.job.user?))
                } else {
                    Some(Group::Qos(q))
                }
            }
            At::Account(a) if per_user => Some(Group::AccountUser(a, self.job.user?)),
            At::Account(a) => Some(Group::Account(a)),
        }
    }

    fn group(&self, kind: LimitKind, index: usize, sink: &mut dyn FnMut(Hit) -> bool) -> bool {
        if let Some((i, limit)) = self.scopes.qos_decides(kind, index) {
            // A QOS limit overrides the association's, so a lifted QOS
            // node cap leaves no node cap at all.
            if self.lift_qos_node_cap && kind == LimitKind::GrpTres(TresKind::Node) {
                return false;
            }
            return self.group_at(At::Qos(i), kind, limit, sink);
        }
        let Some(account) = self.scopes.account else {
            return false;
        };
        if per_user_kind(kind) {
            return self
                .reg
                .account(account)
                .and_then(|info| info.inherited_flat.get(index))
                .is_some_and(|limit| self.group_at(At::Account(account), kind, limit, sink));
        }
        self.reg.chain(account).any(|a| {
            self.reg
                .account(a)
                .and_then(|info| info.own_flat.get(index))
                .is_some_and(|limit| self.group_at(At::Account(a), kind, limit, sink))
        })
    }

    fn group_at(
        &self,
        at: At,
        kind: LimitKind,
        limit: u64,
        sink: &mut dyn FnMut(Hit) -> bool,
    ) -> bool {
        use LimitKind as K;
        let group = self.group_of(at, kind);
        let held = self.held(group);
        let job = self.job;
        let mut hit = Hit {
            at,
            kind,
            used: 0.0,
            asked: 0.0,
            limit: limit as f64,
            never: false,
            at_least: false,
        };
        match kind {
            K::GrpTres(k) | K::MaxTresPerUser(k) => {
                let alone = job.asked.get(k);
                // A job that asks none of a TRES does not wait on its limit.
                if alone == 0 {
                    return false;
                }
                if alone > limit {
                    hit.never = true;
                    hit.asked = alone as f64;
                } else {
                    let now = if k == TresKind::Node {
                        self.new_nodes(group)
                    } else {
                        alone
                    };
                    let used = held.tres.get(k);
                    if now == 0 || used.saturating_add(now) <= limit {
                        return false;
                    }
                    hit.used = used as f64;
                    hit.asked = now as f64;
                }
            }
            K::GrpJobs | K::MaxJobsPerUser => {
                let used = u64::from(held.jobs);
                if used < limit {
                    return false;
                }
                hit.never = limit == 0;
                hit.used = used as f64;
                hit.asked = 1.0;
            }
            K::GrpWall => {
                let used = self.usage_record(at).map_or(0.0, |r| r.wall_s);
                if used < limit as f64 {
                    return false;
                }
                hit.never = limit == 0;
                hit.used = used;
                hit.at_least = true;
            }
            K::GrpTresMins(k) => {
                let amount = job.asked.get(k);
                if amount == 0 {
                    return false;
                }
                // Only with UsageFactorSafe must the job fit its limit with
                // its QOS usage factor applied (Slurm's `Safe`).
                let factor = self
                    .scopes
                    .job_qos()
                    .filter(|s| s.qos.flags.usage_factor_safe)
                    .map_or(1.0, |s| s.qos.usage_factor);
                let asked = amount as f64 * job.time_limit_s as f64 / 60.0 * factor;
                let used = if self.live.is_some() {
                    self.usage_record(at).map_or(0.0, |r| r.tres_s[k.index()]) / 60.0
                        + held.run_mins[k.index()]
                } else {
                    0.0
                };
                let limit = limit as f64;
                if asked > limit {
                    hit.never = true;
                    hit.asked = asked;
                } else if used >= limit {
                    hit.used = used;
                    hit.at_least = true;
                } else if used + asked > limit {
                    hit.used = used;
                    hit.asked = asked;
                } else {
                    return false;
                }
            }
            _ => return false,
        }
        sink(hit)
    }

    fn usage_threshold(&self, sink: &mut dyn FnMut(Hit) -> bool) -> bool {
        let Some(fairshare) = self.job.fairshare else {
            return false;
        };
        self.scopes.qos_scopes().any(|(i, s)| {
            let flags = s.qos.flags;
            match s.qos.usage_threshold {
                Some(threshold) if flags.enforce_usage_threshold && fairshare < threshold => {
                    sink(Hit {
                        at: At::Qos(i),
                        kind: LimitKind::UsageThreshold,
                        used: fairshare,
                        asked: 0.0,
                        limit: threshold,
                        never: false,
                        at_least: false,
                    })
                }
                _ => false,
            }
        })
    }
}

/// A number for a sentence: whole numbers without decimals, others with at
/// most three.
fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i128)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Who sets the limit, as the sentence names it.
fn who(hit: &Hit, reg: &Registry, scopes: &Scopes<'_>) -> String {
    match hit.at {
        At::Qos(i) => match scopes.qos[i].as_ref() {
            Some(QosScope {
                qos,
                partition: Some(p),
                ..
            }) => format!("partition {p} QOS {}", qos.name),
            Some(s) => format!("QOS {}", s.qos.name),
            None => "QOS".to_string(),
        },
        At::Account(a) => {
            let setter = if inherited_kind(hit.kind) {
                reg.chain(a)
                    .find(|&x| {
                        reg.account(x)
                            .is_some_and(|info| limit_of(&info.limits, hit.kind).is_some())
                    })
                    .unwrap_or(a)
            } else {
                a
            };
            format!("account {}", reg.accounts.name(setter))
        }
    }
}

fn render(hit: &Hit, reg: &Registry, scopes: &Scopes<'_>, user: &str) -> LimitHit {
    use LimitKind as K;
    let scope = match hit.at {
        At::Qos(_) => LimitScope::Qos,
        At::Account(_) => LimitScope::Assoc,
    };
    let who = who(hit, reg, scopes);
    let name = limit_name(hit.kind);
    let (used, asked, limit) = (num(hit.used), num(hit.asked), num(hit.limit));
    let detail = match hit.kind {
        K::MaxWall => format!("time limit {asked} s > {limit} s ({who} {name})"),
        K::MaxTresPerJob(k) => format!("{} {asked} asked > {limit} ({who} {name})", k.words()),
        K::MaxTresPerNode(k) => {
            format!(
                "{} {asked} per node asked > {limit} ({who} {name})",
                k.words()
            )
        }
        K::MinTresPerJob(k) => format!("{} {asked} asked < {limit} ({who} {name})", k.words()),
        K::GrpTres(k) | K::MaxTresPerUser(k) if hit.never => format!(
            "asks {} {asked}, more than {who}'s {name} {}={limit} allows at all",
            k.words(),
            k.key()
        ),
        K::GrpTres(k) => format!(
            "{} {used} in use + {asked} asked > {limit} ({who} {name})",
            k.words()
        ),
        K::MaxTresPerUser(k) => format!(
            "{} of user {user} {used} in use + {asked} asked > {limit} ({who} {name})",
            k.words()
        ),
        K::GrpJobs | K::MaxJobsPerUser if hit.never => {
            format!("asks 1 running job, more than {who}'s {name}={limit} allows at all")
        }
        K::GrpJobs => format!("running jobs {used} + 1 > {limit} ({who} {name})"),
        K::MaxJobsPerUser => {
            format!("running jobs of user {user} {used} + 1 > {limit} ({who} {name})")
        }
        K::GrpWall => format!("wall time used {used} s >= {limit} s ({who} {name})"),
        K::GrpTresMins(k) if hit.never => format!(
            "asks {}-minutes {asked}, more than {who}'s {name} {}={limit} allows at all",
            k.key(),
            k.key()
        ),
        K::GrpTresMins(k) if hit.at_least => {
            format!("{}-minutes used {used} >= {limit} ({who} {name})", k.key())
        }
        K::GrpTresMins(k) => format!(
            "{}-minutes {used} used + {asked} asked > {limit} ({who} {name})",
            k.key()
        ),
        K::UsageThreshold => {
            format!("fair-share factor {used} < {limit} ({who} {name})")
        }
    };
    LimitHit {
        reason: Reason::Limit(scope, hit.kind),
        detail,
        never: hit.never,
    }
}

// ---------------------------------------------------------------------------
// Submit.

/// Why a job is refused at submit; the message names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitRefusal {
    #[error("invalid account: account {account} does not exist")]
    UnknownAccount { account: String },
    #[error("invalid account: user {user} has no account")]
    NoAccount { user: String },
    #[error("invalid account: user {user} is not in account {account}")]
    UserNotInAccount { user: String, account: String },
    #[error("invalid QOS: QOS {qos} does not exist")]
    UnknownQos { qos: String },
    #[error("invalid QOS: account {account} may not use QOS {qos} (it may use {allowed})")]
    QosNotAllowed {
        qos: String,
        account: String,
        /// The QOS it may use, comma-separated.
        allowed: String,
    },
    #[error(
        "invalid QOS: QOS {qos} is partition {partition}'s relative QOS and cannot be a job's QOS"
    )]
    RelativePartitionQos { qos: String, partition: String },
    #[error("invalid partition: partition {partition} does not exist")]
    UnknownPartition { partition: String },
    #[error("invalid QOS: QOS {qos} requires a reservation and the job names none")]
    ReservationRequired { qos: String },
    /// Asking a priority the account does not grant: a permission error,
    /// not bad input.
    #[error(
        "permission denied: nice {nice} asks priority {asked}, above account {account}'s max_priority {max_priority}"
    )]
    PermissionDenied {
        nice: i32,
        asked: i64,
        account: String,
        max_priority: i64,
    },
    /// `GrpSubmitJobs` or `MaxSubmitJobsPerUser`.
    #[error("job submit limit reached: {detail}")]
    SubmitLimit { detail: String },
    /// A limit of a QOS with `DenyOnLimit` that the job breaks even alone.
    #[error("job violates a limit and its QOS has DenyOnLimit: {detail}")]
    DeniedOnLimit { reason: Reason, detail: String },
}

/// Pending plus running jobs per limit group, for `GrpSubmitJobs` and
/// `MaxSubmitJobsPerUser`. A pending job counts in the partition QOS of
/// every partition it may run in; a running one in its partition's.
#[derive(Debug, Clone)]
pub struct SubmitCounts {
    reg: Registry,
    counts: HashMap<Group, u32, Fx>,
}

impl SubmitCounts {
    pub fn new(snapshot: &Snapshot, catalog: &Catalog) -> SubmitCounts {
        let mut counts = SubmitCounts {
            reg: Registry::new(snapshot, catalog),
            counts: HashMap::default(),
        };
        for job in &snapshot.pending {
            counts.add(job, catalog);
        }
        // Borrowed runs count toward no submit limit either (idle-fill).
        for r in snapshot.running.iter().filter(|r| !r.borrowed) {
            let account = if r.account.is_empty() {
                catalog.account_of(&r.user, "")
            } else {
                catalog.account(&r.account)
            };
            let qos = catalog.qos_name_of(&r.qos, account);
            let pq = catalog
                .partition(&r.partition)
                .map(|p| p.qos.as_str())
                .filter(|q| !q.is_empty() && *q != qos);
            let account = account.map_or(r.account.as_str(), |a| a.name.as_str());
            counts.bump(&r.user, account, qos, pq.as_slice());
        }
        counts
    }

    /// Counts a job just accepted.
    pub fn add(&mut self, job: &PendingJob, catalog: &Catalog) {
        let account = catalog.account_of(&job.user, &job.account);
        let qos = catalog.qos_name_of(&job.qos, account);
        let mut pqs: Vec<&str> = Vec::new();
        for p in catalog.partitions_of(job) {
            if !p.qos.is_empty() && p.qos != qos && !pqs.contains(&p.qos.as_str()) {
                pqs.push(&p.qos);
            }
        }
        let account = account.map_or(job.account.as_str(), |a| a.name.as_str());
        self.bump(&job.user, account, qos, &pqs);
    }

    fn bump(&mut self, user: &str, account: &str, qos: &str, partition_qos: &[&str]) {
        let user = self.reg.users.intern(user);
        let mut groups = Vec::with_capacity(8);
        for q in std::iter::once(&qos).chain(partition_qos) {
            let q = self.reg.qos.intern(q);
            groups.push(Group::Qos(q));
            groups.push(Group::QosUser(q, user));
        }
        if !account.is_empty() {
            let a = self.reg.intern_account(account);
            groups.extend(self.reg.chain(a).map(Group::Account));
            groups.push(Group::AccountUser(a, user));
        }
        for g in groups {
            *self.counts.entry(g).or_insert(0) += 1;
        }
    }

    fn count(&self, group: Option<Group>) -> u64 {
        group
            .and_then(|g| self.counts.get(&g))
            .map_or(0, |&c| u64::from(c))
    }
}

/// Submit-time checks, in this order: the account (exists, lists the
/// user), the QOS (exists, allowed for the account, not a partition's
/// relative QOS), the partitions exist, `RequiresReservation`, nice within
/// the account's `max_priority`, `GrpSubmitJobs` / `MaxSubmitJobsPerUser`,
/// then `DenyOnLimit`: refused only when no (resource path, partition) it
/// may use passes the limits of a QOS with that flag, judged alone.
pub fn check_submit(
    job: &PendingJob,
    catalog: &Catalog,
    counts: &SubmitCounts,
) -> Result<(), SubmitRefusal> {
    check_submit_jobs(job, catalog, counts, 1)
}

/// Every partition the job or one of its alternatives names exists (with
/// none configured, only the implicit one does).
pub fn check_partition_names(job: &PendingJob, catalog: &Catalog) -> Result<(), SubmitRefusal> {
    match job
        .partitions
        .iter()
        .chain(job.path_partitions.iter().filter(|p| !p.is_empty()))
        .find(|p| !catalog.partition_exists(p))
    {
        Some(p) => Err(SubmitRefusal::UnknownPartition {
            partition: p.clone(),
        }),
        None => Ok(()),
    }
}

/// [`check_submit`] for a submit that makes `new_jobs` jobs of `job`'s
/// kind at once: a job array's tasks, each of which counts against
/// `GrpSubmitJobs` and `MaxSubmitJobsPerUser` as Slurm counts them. The
/// whole array is refused when they do not all fit.
pub fn check_submit_jobs(
    job: &PendingJob,
    catalog: &Catalog,
    counts: &SubmitCounts,
    new_jobs: u64,
) -> Result<(), SubmitRefusal> {
    let new_jobs = new_jobs.max(1);
    let account = catalog.account_of(&job.user, &job.account).ok_or_else(|| {
        if job.account.is_empty() {
            SubmitRefusal::NoAccount {
                user: job.user.clone(),
            }
        } else {
            SubmitRefusal::UnknownAccount {
                account: job.account.clone(),
            }
        }
    })?;
    if !account.users.contains(&job.user) {
        return Err(SubmitRefusal::UserNotInAccount {
            user: job.user.clone(),
            account: account.name.clone(),
        });
    }
    let qos_name = catalog.qos_name_of(&job.qos, Some(account));
    let qos = catalog
        .qos(qos_name)
        .ok_or_else(|| SubmitRefusal::UnknownQos {
            qos: qos_name.to_string(),
        })?;
    let allowed = if account.qos.is_empty() {
        qos_name == NORMAL_QOS
    } else {
        account.qos.iter().any(|q| q == qos_name)
    };
    if !allowed {
        return Err(SubmitRefusal::QosNotAllowed {
            qos: qos_name.to_string(),
            account: account.name.clone(),
            allowed: if account.qos.is_empty() {
                NORMAL_QOS.to_string()
            } else {
                account.qos.join(",")
            },
        });
    }
    let reg = &counts.reg;
    if qos.flags.relative {
        if let Some(id) = reg.partition_qos.iter().position(|pq| *pq == qos.name) {
            return Err(SubmitRefusal::RelativePartitionQos {
                qos: qos.name.clone(),
                partition: reg.partitions.name(id as u32).to_string(),
            });
        }
    }
    check_partition_names(job, catalog)?;
    if qos.flags.requires_reservation && job.reservation.is_empty() {
        return Err(SubmitRefusal::ReservationRequired {
            qos: qos.name.clone(),
        });
    }
    if job.nice < 0 {
        let asked = -i64::from(job.nice);
        if asked > account.max_priority {
            return Err(SubmitRefusal::PermissionDenied {
                nice: job.nice,
                asked,
                account: account.name.clone(),
                max_priority: account.max_priority,
            });
        }
    }
    let partitions = catalog.partitions_of(job);
    let partitions: Vec<Option<&Partition>> = if partitions.is_empty() {
        vec![None]
    } else {
        partitions.into_iter().map(Some).collect()
    };
    let user = reg.users.get(&job.user);
    for &p in &partitions {
        let scopes = Scopes::resolve(reg, catalog, qos, p, &account.name);
        submit_limits(&scopes, reg, counts, user, &job.user, new_jobs)?;
    }
    deny_on_limit(job, catalog, reg, qos, &account.name, &partitions)
}

fn submit_limits(
    scopes: &Scopes<'_>,
    reg: &Registry,
    counts: &SubmitCounts,
    user: Option<u32>,
    user_name: &str,
    new_jobs: u64,
) -> Result<(), SubmitRefusal> {
    let refuse = |count: u64, limit: u64, who: String, name: &str, of_user: bool| {
        let whose = if of_user {
            format!(" by user {user_name}")
        } else {
            String::new()
        };
        Err(SubmitRefusal::SubmitLimit {
            detail: format!("jobs submitted{whose} {count} + {new_jobs} > {limit} ({who} {name})"),
        })
    };
    let qos_who = |s: &QosScope<'_>| match s.partition {
        Some(p) => format!("partition {p} QOS {}", s.qos.name),
        None => format!("QOS {}", s.qos.name),
    };
    // GrpSubmitJobs: the first QOS that sets it, else every account level.
    let grp = scopes
        .qos_scopes()
        .find_map(|(_, s)| s.qos.limits.grp_submit_jobs.map(|l| (s, l)));
    match grp {
        Some((s, limit)) => {
            let count = counts.count(s.id.map(Group::Qos));
            if count + new_jobs > u64::from(limit) {
                return refuse(count, u64::from(limit), qos_who(s), "GrpSubmitJobs", false);
            }
        }
        None => {
            if let Some(account) = scopes.account {
                for a in reg.chain(account) {
                    let Some(limit) = reg.account(a).and_then(|i| i.limits.grp_submit_jobs) else {
                        continue;
                    };
                    let count = counts.count(Some(Group::Account(a)));
                    if count + new_jobs > u64::from(limit) {
                        let who = format!("account {}", reg.accounts.name(a));
                        return refuse(count, u64::from(limit), who, "GrpSubmitJobs", false);
                    }
                }
            }
        }
    }
    let per_user = scopes
        .qos_scopes()
        .find_map(|(_, s)| s.qos.limits.max_submit_jobs_per_user.map(|l| (s, l)));
    let name = "MaxSubmitJobsPerUser";
    match per_user {
        Some((s, limit)) => {
            let group = s.id.zip(user).map(|(q, u)| Group::QosUser(q, u));
            let count = counts.count(group);
            if count + new_jobs > u64::from(limit) {
                return refuse(count, u64::from(limit), qos_who(s), name, true);
            }
        }
        None => {
            let Some(account) = scopes.account else {
                return Ok(());
            };
            let limit = reg
                .account(account)
                .and_then(|i| i.inherited.max_submit_jobs_per_user);
            if let Some(limit) = limit {
                let group = user.map(|u| Group::AccountUser(account, u));
                let count = counts.count(group);
                if count + new_jobs > u64::from(limit) {
                    let setter = reg
                        .chain(account)
                        .find(|&a| {
                            reg.account(a)
                                .is_some_and(|i| i.limits.max_submit_jobs_per_user.is_some())
                        })
                        .unwrap_or(account);
                    let who = format!("account {}", reg.accounts.name(setter));
                    return refuse(count, u64::from(limit), who, name, true);
                }
            }
        }
    }
    Ok(())
}

/// `DenyOnLimit`: the job is judged alone (every group empty) against each
/// (resource path, partition) it may use; a hit counts when the deciding
/// scope is a QOS with the flag, or the association when either QOS has
/// it. Refused only when every combination has such a hit.
fn deny_on_limit(
    job: &PendingJob,
    catalog: &Catalog,
    reg: &Registry,
    qos: &Qos,
    account: &str,
    partitions: &[Option<&Partition>],
) -> Result<(), SubmitRefusal> {
    let mut first: Option<SubmitRefusal> = None;
    for (path, shape) in job.paths().iter().enumerate() {
        for &p in partitions {
            if !catalog.runs_in(job, path, p) {
                continue;
            }
            let scopes = Scopes::resolve(reg, catalog, qos, p, account);
            let any_deny = scopes.qos_scopes().any(|(_, s)| s.qos.flags.deny_on_limit);
            if !any_deny {
                return Ok(());
            }
            let time_limit_s = match (job.time_limit_s, p) {
                (0, Some(p)) => p.default_limit_s().unwrap_or(0),
                (t, _) => t,
            };
            let view = JobView {
                user: reg.users.get(&job.user),
                shape,
                asked: job_tres(shape),
                time_limit_s,
                hosts: None,
                fairshare: None,
            };
            let eval = Eval {
                reg,
                live: None,
                job: &view,
                scopes: &scopes,
                mask: scopes.mask(reg),
                lift_qos_node_cap: false,
            };
            let mut denied: Option<Hit> = None;
            eval.run(&mut |hit| {
                let deny = match hit.at {
                    At::Qos(i) => scopes.qos[i]
                        .as_ref()
                        .is_some_and(|s| s.qos.flags.deny_on_limit),
                    At::Account(_) => true,
                };
                if deny {
                    denied = Some(hit);
                }
                deny
            });
            let Some(hit) = denied else {
                return Ok(());
            };
            if first.is_none() {
                let rendered = render(&hit, reg, &scopes, &job.user);
                first = Some(SubmitRefusal::DeniedOnLimit {
                    reason: rendered.reason,
                    detail: rendered.detail,
                });
            }
        }
    }
    match first {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}
