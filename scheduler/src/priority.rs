//! Multifactor priority (Slurm's `priority/multifactor`), fair share and the
//! queue order.
//!
//! A job's priority is the sum of weight times factor over age, fair share,
//! job size, partition, QOS and association, each term floored to a whole
//! number, plus the admin inputs added directly (account priority, user
//! priority) minus its nice. The queue is ordered by that total, then the
//! least-served account first, then submit time, then job id.
//!
//! Everything here runs once per pass over every pending job, so the per-job
//! work is a handful of hash lookups on borrowed names: no allocation per
//! job, policy objects resolved once per distinct name.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::assoc::{Account, ROOT_ACCOUNT};
use crate::catalog::{Catalog, ACCOUNT_DEPTH_MAX};
use crate::fxhash::{Fx, FxMap};
use crate::model::JobId;
use crate::pass::{PendingJob, PriorityWeights, Snapshot};
use crate::qos::TresKind;

/// A job's priority and its parts, as `sprio` shows them. All whole numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityBreakdown {
    pub job_id: JobId,
    pub age: i64,
    pub fairshare: i64,
    pub job_size: i64,
    pub partition: i64,
    pub qos: i64,
    pub assoc: i64,
    /// The account's admin-set priority, added as it is.
    pub account: i64,
    /// The user's admin-set priority, added as it is.
    pub user: i64,
    /// Minus the job's nice.
    pub nice: i64,
    pub total: i64,
    /// An administrator fixed the total (`scontrol update Priority=N`);
    /// the parts are then all 0.
    #[serde(default)]
    pub fixed: bool,
}

impl PriorityBreakdown {
    /// An administrator's fixed priority: the total, no parts.
    pub fn fixed_at(job_id: JobId, priority: u32) -> PriorityBreakdown {
        PriorityBreakdown {
            job_id,
            age: 0,
            fairshare: 0,
            job_size: 0,
            partition: 0,
            qos: 0,
            assoc: 0,
            account: 0,
            user: 0,
            nice: 0,
            total: i64::from(priority),
            fixed: true,
        }
    }

    /// "Priority set (age: 3, fairshare: 0, ..., account: 5, user: 1, nice: 0)":
    /// the job event text.
    pub fn event_text(&self) -> String {
        if self.fixed {
            return format!("Priority set by an administrator: {}", self.total);
        }
        format!(
            "Priority set (age: {}, fairshare: {}, job_size: {}, partition: {}, qos: {}, \
             assoc: {}, account: {}, user: {}, nice: {})",
            self.age,
            self.fairshare,
            self.job_size,
            self.partition,
            self.qos,
            self.assoc,
            self.account,
            self.user,
            self.nice
        )
    }
}

/// "Priority updated: account 5 -> 10" style event texts for a change in an
/// account's or user's admin priority between two breakdowns of one job: one
/// line per changed admin input, empty when none changed.
pub fn update_texts(old: &PriorityBreakdown, new: &PriorityBreakdown) -> Vec<String> {
    [
        ("account", old.account, new.account),
        ("user", old.user, new.user),
    ]
    .into_iter()
    .filter(|(_, was, now)| was != now)
    .map(|(what, was, now)| format!("Priority updated: {what} {was} -> {now}"))
    .collect()
}

/// The parent an account's shares are normalised under: its parent when
/// that is another known account, else the root (an unknown or missing
/// parent hangs the account at the top, as `assoc` documents for none).
fn parent_key<'a>(account: &'a Account, catalog: &Catalog<'a>) -> &'a str {
    let parent = account.parent.as_str();
    if parent == ROOT_ACCOUNT || parent == account.name || catalog.account(parent).is_none() {
        ROOT_ACCOUNT
    } else {
        parent
    }
}

/// A site may define the root itself as an account; it is the tree, not a
/// sibling of its children, so fair share leaves it out (factor 1.0).
fn is_root(account: &Account) -> bool {
    account.name == ROOT_ACCOUNT
}

/// Usage that can be divided safely: bad input (negative, NaN) counts as
/// none rather than poisoning every factor.
fn clean_usage(value: f64) -> f64 {
    if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    }
}

/// Fair-share factor per account name: Slurm's classic `F = 2^(-U/S)`.
///
/// `S` is the account's shares over the sum of its siblings' shares, times
/// its parent's `S`, up to the root. `U` is its decayed billing usage
/// ([`crate::usage::UsageRecord::billing`], which already includes its
/// sub-accounts' usage) over the total of the top-level accounts. An
/// account with no usage gets 1.0; one whose normalised shares are zero gets
/// 0.0 (Slurm returns 0 for `shares_norm <= 0` before looking at usage);
/// an account in a parent cycle never reaches the root and so holds no
/// shares either.
pub fn fairshare_factors(snapshot: &Snapshot, catalog: &Catalog) -> BTreeMap<String, f64> {
    let mut sibling_shares: FxMap<&str, u64> = FxMap::default();
    for a in snapshot.accounts.iter().filter(|a| !is_root(a)) {
        *sibling_shares.entry(parent_key(a, catalog)).or_default() += u64::from(a.shares);
    }
    let usage_of = |name: &str| {
        clean_usage(
            snapshot
                .usage
                .accounts
                .get(name)
                .map(|r| r.billing())
                .unwrap_or(0.0),
        )
    };
    let total_usage: f64 = snapshot
        .accounts
        .iter()
        .filter(|a| !is_root(a) && parent_key(a, catalog) == ROOT_ACCOUNT)
        .map(|a| usage_of(&a.name))
        .sum();

    let mut out = BTreeMap::new();
    for a in &snapshot.accounts {
        let shares = normalised_shares(a, catalog, &sibling_shares);
        let usage = usage_of(&a.name);
        let factor = if is_root(a) {
            1.0
        } else if shares <= 0.0 {
            0.0
        } else if usage <= 0.0 || total_usage <= 0.0 {
            1.0
        } else {
            (-(usage / total_usage) / shares).exp2()
        };
        out.insert(a.name.clone(), factor);
    }
    out
}

/// The account's share of the whole tree: the product of its and its
/// ancestors' fractions among their siblings. 0 when the walk up never
/// reaches the root (a cycle in bad input).
fn normalised_shares(
    account: &Account,
    catalog: &Catalog,
    sibling_shares: &FxMap<&str, u64>,
) -> f64 {
    let mut shares = 1.0;
    let mut current = account;
    for _ in 0..ACCOUNT_DEPTH_MAX {
        let parent = parent_key(current, catalog);
        let siblings = sibling_shares.get(parent).copied().unwrap_or(0);
        if siblings == 0 {
            return 0.0;
        }
        shares *= f64::from(current.shares) / siblings as f64;
        if parent == ROOT_ACCOUNT {
            return shares;
        }
        match catalog.account(parent) {
            Some(p) => current = p,
            None => return shares,
        }
    }
    0.0
}

/// The TRES the least-served measure looks at, as the queue model names
/// them: GPUs, cores, memory and workers (hosts).
const SERVED_KINDS: [TresKind; 4] = [TresKind::Gpu, TresKind::Cpu, TresKind::Mem, TresKind::Node];

/// What an account's running jobs hold now.
#[derive(Default)]
struct Held<'s> {
    gpu: u64,
    cpu: u64,
    mem_mb: u64,
    /// Distinct hosts (only their number is read).
    hosts: HashSet<&'s str, Fx>,
}

impl Held<'_> {
    fn get(&self, kind: TresKind) -> u64 {
        match kind {
            TresKind::Gpu => self.gpu,
            TresKind::Cpu => self.cpu,
            TresKind::Mem => self.mem_mb,
            TresKind::Node => self.hosts.len() as u64,
            TresKind::Emu => 0,
        }
    }
}

/// The least-served measure per account name: the largest fraction of its
/// quota (its `GrpTRES` for GPUs, CPUs, memory and nodes; kinds without a
/// limit are ignored) that its running jobs hold now, divided by its shares.
/// An account without a quota holds none of it (0.0).
///
/// Held counts every running job of the account and of its sub-accounts,
/// as Slurm's `GrpTRES` on an account does; nodes are the distinct hosts
/// they run on. A zero quota that is held at all, or zero shares with
/// anything held, is infinitely served.
pub fn served_fractions(snapshot: &Snapshot, catalog: &Catalog) -> BTreeMap<String, f64> {
    let has_quota = |a: &Account| {
        SERVED_KINDS
            .iter()
            .any(|&k| a.limits.grp_tres.get(k).is_some())
    };
    let mut held: FxMap<&str, Held> = snapshot
        .accounts
        .iter()
        .filter(|a| has_quota(a))
        .map(|a| (a.name.as_str(), Held::default()))
        .collect();
    if !held.is_empty() {
        // By account: it and its ancestors that have a quota (the walk up
        // the tree is the same for every job of the account).
        let mut quota_lineage: FxMap<&str, Vec<&str>> = FxMap::default();
        // Borrowed runs (idle-fill) hold none of their account's quota.
        for r in snapshot.running.iter().filter(|r| !r.borrowed) {
            let Some(account) = catalog.account_of(&r.user, &r.account) else {
                continue;
            };
            let hosts = r.hosts.len() as u64;
            let lineage = quota_lineage
                .entry(account.name.as_str())
                .or_insert_with(|| {
                    let mut found = Vec::new();
                    let mut name = account.name.as_str();
                    for _ in 0..ACCOUNT_DEPTH_MAX {
                        if held.contains_key(name) {
                            found.push(name);
                        }
                        match catalog.account(name) {
                            Some(a) if parent_key(a, catalog) != ROOT_ACCOUNT => {
                                name = a.parent.as_str();
                            }
                            _ => break,
                        }
                    }
                    found
                });
            for &name in lineage.iter() {
                if let Some(h) = held.get_mut(name) {
                    h.gpu = h
                        .gpu
                        .saturating_add(u64::from(r.per_host.gpus).saturating_mul(hosts));
                    h.cpu = h
                        .cpu
                        .saturating_add(u64::from(r.per_host.cpus).saturating_mul(hosts));
                    h.mem_mb = h
                        .mem_mb
                        .saturating_add(r.per_host.mem_mb.saturating_mul(hosts));
                    h.hosts.extend(r.hosts.iter().map(String::as_str));
                }
            }
        }
    }

    let mut out = BTreeMap::new();
    for a in &snapshot.accounts {
        let fraction = match held.get(a.name.as_str()) {
            None => 0.0,
            Some(h) => SERVED_KINDS
                .iter()
                .filter_map(|&k| a.limits.grp_tres.get(k).map(|quota| (h.get(k), quota)))
                .map(|(held, quota)| ratio(held as f64, quota as f64))
                .fold(0.0, f64::max),
        };
        out.insert(a.name.clone(), ratio(fraction, f64::from(a.shares)));
    }
    out
}

/// `num / den`, with anything over nothing infinite and nothing over
/// nothing zero.
fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else if num > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// `weight * min(num, den) / den`, floored, in integers so that e.g. one
/// hour of a week's aging at weight 168 is exactly 1.
fn scaled(weight: u32, num: u64, den: u64) -> i64 {
    if den == 0 {
        return 0;
    }
    let num = num.min(den);
    // At most `weight`, a u32, so it fits; the u128 path (a slow division)
    // only for products past u64.
    match u64::from(weight).checked_mul(num) {
        Some(product) => (product / den) as i64,
        None => (u128::from(weight) * u128::from(num) / u128::from(den)) as i64,
    }
}

/// What a job's account contributes, resolved once per distinct name.
#[derive(Clone, Copy)]
struct AccountInputs {
    priority: i64,
    fairshare: f64,
    /// The priority of its default QOS, for jobs naming none.
    default_qos_priority: i64,
}

/// What a job's user contributes, resolved once per distinct name, with the
/// account its jobs naming none run under: one lookup serves most jobs.
#[derive(Clone, Copy)]
struct UserInputs {
    priority: i64,
    default_account: Option<AccountInputs>,
}

fn qos_priority(catalog: &Catalog, name: &str) -> i64 {
    catalog.qos(name).map(|q| q.priority).unwrap_or(0)
}

fn account_inputs<'a>(
    account: Option<&'a Account>,
    catalog: &Catalog<'a>,
    fairshare: &BTreeMap<String, f64>,
) -> Option<AccountInputs> {
    account.map(|a| AccountInputs {
        priority: a.priority,
        fairshare: fairshare.get(&a.name).copied().unwrap_or(1.0),
        default_qos_priority: qos_priority(catalog, catalog.qos_name_of("", Some(a))),
    })
}

/// Every pending job's breakdown at `now_ms`, in `snapshot.pending` order.
///
/// - age = `weights.age * min(wait / max_age, 1)`, the wait counted from
///   the later of submit and begin time (a job cannot age before it may
///   run); with `max_age_s` 0 the factor is 1 as soon as it may run;
/// - fair share = `weights.fairshare * F` of its account (1.0 when the
///   account cannot be resolved);
/// - job size = `weights.job_size * nodes / hosts in the cluster` (Slurm's
///   default, favouring large jobs), nodes of its first resource path;
/// - partition = `weights.partition * factor / highest factor`, for the
///   first of its partitions that exists (else the default partition);
/// - qos = `weights.qos * priority / highest QOS priority`, clamped to
///   [0, 1] (0 when that highest priority is not positive): a negative QOS
///   priority, as a burst QOS has, gives the factor 0, not less;
/// - assoc = `weights.assoc * (account + user priority) / the highest such
///   sum`, clamped to [0, 1] (0 when that highest sum is not positive);
/// - account, user: the admin inputs, added as they are; nice: `-nice`.
///
/// Each weighted term is floored on its own, so the parts add up exactly to
/// the total.
pub fn priorities(
    snapshot: &Snapshot,
    catalog: &Catalog,
    weights: &PriorityWeights,
    fairshare: &BTreeMap<String, f64>,
    now_ms: u64,
) -> Vec<PriorityBreakdown> {
    let hosts = snapshot.hosts.len() as u64;
    let max_age_ms = weights.max_age_s.saturating_mul(1000);
    let assoc_max = assoc_priority_max(snapshot, catalog);
    // partitions_of on a job naming none yields the default partition.
    let default_partition_factor = catalog
        .partitions_of(&PendingJob::default())
        .first()
        .map(|p| p.priority_job_factor);

    // Keyed by the account a job names, or by user for jobs naming none
    // (their default account depends on the user).
    let normal_qos_priority = qos_priority(catalog, catalog.qos_name_of("", None));
    let mut users: FxMap<&str, UserInputs> = FxMap::default();
    let mut accounts: FxMap<&str, Option<AccountInputs>> = FxMap::default();
    let mut qos_priorities: FxMap<&str, i64> = FxMap::default();
    let mut partition_factor: FxMap<&str, Option<u32>> = FxMap::default();

    let mut out = Vec::with_capacity(snapshot.pending.len());
    // Neighbouring jobs mostly share user, account, QOS and partitions (a
    // trace replay: all of them); their looked-up inputs are reused.
    let mut previous: Option<(&PendingJob, i64, Option<AccountInputs>, i64, u32)> = None;
    for job in &snapshot.pending {
        if job.admin_priority > 0 {
            out.push(PriorityBreakdown::fixed_at(job.id, job.admin_priority));
            continue;
        }
        let same_as_previous = previous.filter(|(p, ..)| {
            same_str(&p.user, &job.user)
                && same_str(&p.account, &job.account)
                && same_str(&p.qos, &job.qos)
                && p.partitions == job.partitions
        });
        let (user, inputs, qos, partition) = match same_as_previous {
            Some((_, user, inputs, qos, partition)) => (user, inputs, qos, partition),
            None => {
                let user_inputs = *users
                    .entry(job.user.as_str())
                    .or_insert_with(|| UserInputs {
                        priority: catalog.user(&job.user).map(|u| u.priority).unwrap_or(0),
                        default_account: account_inputs(
                            catalog.account_of(&job.user, ""),
                            catalog,
                            fairshare,
                        ),
                    });
                let user = user_inputs.priority;
                let inputs = if job.account.is_empty() {
                    user_inputs.default_account
                } else {
                    *accounts.entry(job.account.as_str()).or_insert_with(|| {
                        account_inputs(catalog.account(&job.account), catalog, fairshare)
                    })
                };
                let qos = if job.qos.is_empty() {
                    inputs.map_or(normal_qos_priority, |i| i.default_qos_priority)
                } else {
                    *qos_priorities
                        .entry(job.qos.as_str())
                        .or_insert_with(|| qos_priority(catalog, &job.qos))
                };
                let partition = match job.partitions.first() {
                    None => default_partition_factor,
                    Some(first) => {
                        let cached = *partition_factor.entry(first.as_str()).or_insert_with(|| {
                            catalog.partition(first).map(|p| p.priority_job_factor)
                        });
                        // An unknown first name is rare (the pass reports it); the
                        // next known one stands in without caching.
                        cached.or_else(|| {
                            job.partitions
                                .iter()
                                .skip(1)
                                .find_map(|p| catalog.partition(p))
                                .map(|p| p.priority_job_factor)
                        })
                    }
                }
                .unwrap_or(0);
                previous = Some((job, user, inputs, qos, partition));
                (user, inputs, qos, partition)
            }
        };

        let account_priority = inputs.map(|i| i.priority).unwrap_or(0);
        let eligible_ms = job.submit_ms.max(job.begin_ms);
        let age = if max_age_ms == 0 {
            if now_ms >= eligible_ms {
                i64::from(weights.age)
            } else {
                0
            }
        } else {
            scaled(weights.age, now_ms.saturating_sub(eligible_ms), max_age_ms)
        };
        let fs_factor = inputs.map(|i| i.fairshare).unwrap_or(1.0);
        let fairshare_term = weighted(weights.fairshare, fs_factor);
        let nodes = job.paths().first().map(|s| s.hosts_needed()).unwrap_or(1) as u64;
        let job_size = scaled(weights.job_size, nodes, hosts);
        let partition_term = scaled(
            weights.partition,
            u64::from(partition),
            u64::from(catalog.partition_factor_max),
        );
        // A negative QOS priority (a burst QOS) ranks its jobs by the
        // factor's floor, 0, like the assoc factor: the factor is a share
        // of the weight, never a penalty.
        let qos_max = catalog.qos_priority_max;
        let qos_term = if qos_max > 0 {
            scaled(weights.qos, qos.clamp(0, qos_max) as u64, qos_max as u64)
        } else {
            0
        };
        let assoc_sum = account_priority.saturating_add(user);
        let assoc = if assoc_max > 0 {
            scaled(
                weights.assoc,
                assoc_sum.clamp(0, assoc_max) as u64,
                assoc_max as u64,
            )
        } else {
            0
        };
        let nice = -i64::from(job.nice);
        let total = [
            age,
            fairshare_term,
            job_size,
            partition_term,
            qos_term,
            assoc,
            account_priority,
            user,
            nice,
        ]
        .into_iter()
        .fold(0i64, i64::saturating_add);
        out.push(PriorityBreakdown {
            job_id: job.id,
            age,
            fairshare: fairshare_term,
            job_size,
            partition: partition_term,
            qos: qos_term,
            assoc,
            account: account_priority,
            user,
            nice,
            total,
            fixed: false,
        });
    }
    out
}

/// `weight * factor` floored, the factor held to [0, 1].
fn weighted(weight: u32, factor: f64) -> i64 {
    let factor = if factor.is_nan() {
        0.0
    } else {
        factor.clamp(0.0, 1.0)
    };
    (f64::from(weight) * factor).floor() as i64
}

/// The highest account + user priority any job could have: over every
/// account, its priority plus each listed user's (or alone when it lists
/// none). Normalises the association factor.
fn assoc_priority_max(snapshot: &Snapshot, catalog: &Catalog) -> i64 {
    snapshot
        .accounts
        .iter()
        .map(|a| {
            if a.users.is_empty() {
                a.priority
            } else {
                a.users
                    .iter()
                    .map(|u| {
                        a.priority
                            .saturating_add(catalog.user(u).map(|r| r.priority).unwrap_or(0))
                    })
                    .max()
                    .unwrap_or(a.priority)
            }
        })
        .max()
        .unwrap_or(0)
}

/// String equality that settles empty strings (the common case in a trace
/// replay) without calling `memcmp`, which costs more than the rest of the
/// per-job work on a long queue.
fn same_str(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// An f64 as bits that sort the way [`f64::total_cmp`] does.
fn total_order_bits(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// The queue order: indices into `pending` by total priority (highest
/// first), then the least-served account first ([`served_fractions`];
/// an account not in it counts as served 0), then submit time, then job id.
/// `breakdowns` is [`priorities`]' answer for the same `pending`.
pub fn queue_order(
    pending: &[Arc<PendingJob>],
    breakdowns: &[PriorityBreakdown],
    served: &BTreeMap<String, f64>,
    catalog: &Catalog,
) -> Vec<usize> {
    debug_assert_eq!(pending.len(), breakdowns.len());
    let served_of = |account: Option<&Account>| {
        total_order_bits(
            account
                .and_then(|a| served.get(&a.name))
                .copied()
                .unwrap_or(0.0),
        )
    };
    let mut by_account: FxMap<&str, u64> = FxMap::default();
    let mut by_user_default: FxMap<&str, u64> = FxMap::default();
    let mut previous: Option<(&PendingJob, u64)> = None;
    let mut keys: Vec<(Reverse<i64>, u64, u64, JobId, usize)> = pending
        .iter()
        .enumerate()
        .map(|(index, job)| {
            // Neighbours mostly share user and account: reuse the lookup.
            let reuse = previous.filter(|(p, _): &(&PendingJob, u64)| {
                same_str(&p.account, &job.account)
                    && (!job.account.is_empty() || same_str(&p.user, &job.user))
            });
            let served = if let Some((_, served)) = reuse {
                served
            } else if job.account.is_empty() {
                *by_user_default
                    .entry(job.user.as_str())
                    .or_insert_with(|| served_of(catalog.account_of(&job.user, "")))
            } else {
                *by_account
                    .entry(job.account.as_str())
                    .or_insert_with(|| served_of(catalog.account(&job.account)))
            };
            previous = Some((job, served));
            // A job without a breakdown (a caller's mismatch) sorts last
            // rather than panicking the pass.
            let total = breakdowns.get(index).map(|b| b.total).unwrap_or(i64::MIN);
            (Reverse(total), served, job.submit_ms, job.id, index)
        })
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|k| k.4).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assoc::UserRecord;
    use crate::model::{Host, Inventory, Resources};
    use crate::partition::Partition;
    use crate::pass::{RunningJob, Shape};
    use crate::qos::Qos;
    use crate::usage::UsageRecord;

    const HOUR_MS: u64 = 3_600_000;

    fn account(name: &str, parent: &str, shares: u32) -> Account {
        Account {
            name: name.into(),
            parent: parent.into(),
            shares,
            ..Account::default()
        }
    }

    fn billing(cpu_s: f64) -> UsageRecord {
        let mut r = UsageRecord::default();
        r.tres_s[TresKind::Cpu.index()] = cpu_s;
        r
    }

    fn job(id: JobId, user: &str, account: &str, submit_ms: u64) -> PendingJob {
        PendingJob {
            id,
            user: user.into(),
            account: account.into(),
            submit_ms,
            ..PendingJob::new(id, Resources::cpu_mem(1, 100))
        }
    }

    fn running(id: JobId, account: &str, hosts: &[&str], per_host: Resources) -> RunningJob {
        RunningJob {
            id,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            per_host,
            user: "u".into(),
            account: account.into(),
            ..RunningJob::default()
        }
    }

    fn hosts(n: usize) -> Vec<Host> {
        (0..n)
            .map(|i| Host::new(format!("h{i}"), Inventory::cpu_mem(8, 1000)))
            .collect()
    }

    fn weights() -> PriorityWeights {
        PriorityWeights {
            age: 0,
            ..PriorityWeights::default()
        }
    }

    /// The tree, shares and usage (CPU-seconds, parents include children):
    ///
    /// ```text
    /// root
    /// ├── a  shares 3, usage 100   S = 3/4            = 0.75
    /// │   ├── a1 shares 1, usage 100   S = 0.75 * 1/4 = 0.1875
    /// │   └── a2 shares 3, usage 0     S = 0.75 * 3/4 = 0.5625
    /// ├── b  shares 1, usage 300   S = 1/4            = 0.25
    /// └── c  shares 0, usage 0     S = 0
    /// ```
    ///
    /// Total top-level usage = a + b = 400, so U(a) = U(a1) = 0.25,
    /// U(b) = 0.75. F = 2^(-U/S): a = 2^(-1/3), a1 = 2^(-4/3), a2 = 1 (no
    /// usage), b = 2^-3 = 0.125, c = 0 (no shares, even without usage).
    fn tree() -> Snapshot {
        let mut s = Snapshot {
            accounts: vec![
                account("a", ROOT_ACCOUNT, 3),
                account("a1", "a", 1),
                account("a2", "a", 3),
                account("b", ROOT_ACCOUNT, 1),
                account("c", "", 0),
            ],
            ..Snapshot::default()
        };
        s.usage.accounts.insert("a".into(), billing(100.0));
        s.usage.accounts.insert("a1".into(), billing(100.0));
        s.usage.accounts.insert("b".into(), billing(300.0));
        s
    }

    #[test]
    fn fairshare_classic_on_a_small_tree() {
        let s = tree();
        let f = fairshare_factors(&s, &Catalog::new(&s));
        assert_eq!(f.len(), 5);
        assert!((f["a"] - 2f64.powf(-1.0 / 3.0)).abs() < 1e-12, "{}", f["a"]);
        assert!((f["a"] - 0.793_700_525_984_1).abs() < 1e-12);
        assert!(
            (f["a1"] - 2f64.powf(-4.0 / 3.0)).abs() < 1e-12,
            "{}",
            f["a1"]
        );
        assert!((f["a1"] - 0.396_850_262_992_05).abs() < 1e-12);
        assert_eq!(f["a2"], 1.0);
        assert_eq!(f["b"], 0.125);
        assert_eq!(f["c"], 0.0);
    }

    #[test]
    fn fairshare_ignores_a_defined_root_account() {
        let mut s = tree();
        let before = fairshare_factors(&s, &Catalog::new(&s));
        s.accounts.push(account(ROOT_ACCOUNT, "", 7));
        s.usage.accounts.insert(ROOT_ACCOUNT.into(), billing(1.0));
        let mut after = fairshare_factors(&s, &Catalog::new(&s));
        assert_eq!(after.remove(ROOT_ACCOUNT), Some(1.0));
        assert_eq!(after, before);
    }

    #[test]
    fn fairshare_without_any_usage_is_one_and_bad_usage_counts_as_none() {
        let mut s = tree();
        s.usage.accounts.clear();
        s.usage.accounts.insert("b".into(), billing(f64::NAN));
        s.usage.accounts.insert("a".into(), billing(-5.0));
        let f = fairshare_factors(&s, &Catalog::new(&s));
        for name in ["a", "a1", "a2", "b"] {
            assert_eq!(f[name], 1.0, "{name}");
        }
        assert_eq!(f["c"], 0.0);
    }

    #[test]
    fn fairshare_unknown_parent_is_top_level_and_a_cycle_has_no_shares() {
        let mut s = Snapshot {
            accounts: vec![
                account("x", "nosuch", 1),
                account("y", ROOT_ACCOUNT, 1),
                account("p", "q", 1),
                account("q", "p", 1),
            ],
            ..Snapshot::default()
        };
        s.usage.accounts.insert("x".into(), billing(50.0));
        s.usage.accounts.insert("y".into(), billing(50.0));
        s.usage.accounts.insert("p".into(), billing(10.0));
        let f = fairshare_factors(&s, &Catalog::new(&s));
        // x and y each hold S = 1/2 and U = 1/2: 2^-1.
        assert_eq!(f["x"], 0.5);
        assert_eq!(f["y"], 0.5);
        assert_eq!(f["p"], 0.0);
        assert_eq!(f["q"], 0.0);
    }

    fn quota_snapshot() -> Snapshot {
        let mut x = account("x", ROOT_ACCOUNT, 2);
        x.limits.grp_tres.gpu = Some(8);
        x.limits.grp_tres.cpu = Some(100);
        x.limits.grp_tres.node = Some(4);
        let xc = account("xc", "x", 1);
        let y = account("y", ROOT_ACCOUNT, 1);
        let mut z = account("z", ROOT_ACCOUNT, 1);
        z.limits.grp_tres.gpu = Some(0);
        let mut w = account("w", ROOT_ACCOUNT, 0);
        w.limits.grp_tres.mem_mb = Some(1000);
        let mut v = account("v", ROOT_ACCOUNT, 1);
        v.limits.grp_tres.emu = Some(1);
        let gpu = |g: u32| Resources {
            cpus: 2,
            mem_mb: 10,
            gpus: g,
            emu: 0,
        };
        Snapshot {
            accounts: vec![x, xc, y, z, w, v],
            running: vec![
                running(1, "x", &["h1"], gpu(1)),
                running(2, "x", &["h1", "h2"], gpu(1)),
                running(3, "xc", &["h1"], gpu(0)),
                running(4, "y", &["h3"], gpu(8)),
                running(5, "z", &["h4"], gpu(1)),
                running(6, "w", &["h5"], gpu(0)),
                running(7, "v", &["h5"], gpu(0)),
                running(8, "nosuch", &["h6"], gpu(8)),
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn served_is_largest_fraction_of_quota_over_shares() {
        let s = quota_snapshot();
        let served = served_fractions(&s, &Catalog::new(&s));
        // x: gpus 1 + 2 = 3 of 8; cpus 2 + 4 + 2 (xc's job) = 8 of 100;
        // nodes h1, h2 = 2 of 4 (h1 counted once); largest 0.5, over 2
        // shares = 0.25.
        assert_eq!(served["x"], 0.25);
        // xc and y have no quota: they hold none of it.
        assert_eq!(served["xc"], 0.0);
        assert_eq!(served["y"], 0.0);
        // A zero GPU quota that is held is infinitely served.
        assert_eq!(served["z"], f64::INFINITY);
        // 10 of 1000 MiB, but zero shares.
        assert_eq!(served["w"], f64::INFINITY);
        // Only emulator units limited: not one of the measured kinds.
        assert_eq!(served["v"], 0.0);
        assert_eq!(served.len(), 6);
    }

    #[test]
    fn served_is_zero_with_nothing_running() {
        let mut s = quota_snapshot();
        s.running.clear();
        let served = served_fractions(&s, &Catalog::new(&s));
        assert!(served.values().all(|&v| v == 0.0), "{served:?}");
    }

    /// A site with every factor in play.
    fn site() -> Snapshot {
        let mut a = account("a", ROOT_ACCOUNT, 1);
        a.priority = 5;
        a.users = vec!["alice".into()];
        a.qos = vec!["low".into(), "high".into()];
        let mut b = account("b", ROOT_ACCOUNT, 1);
        b.priority = 10;
        b.users = vec!["bob".into()];
        let mut s = Snapshot {
            hosts: hosts(4),
            accounts: vec![a, b],
            users: vec![
                UserRecord {
                    name: "alice".into(),
                    priority: 1,
                    default_account: String::new(),
                },
                UserRecord {
                    name: "bob".into(),
                    priority: 0,
                    default_account: String::new(),
                },
            ],
            qos: vec![
                Qos {
                    priority: 100,
                    ..Qos::named("high")
                },
                Qos {
                    priority: 25,
                    ..Qos::named("low")
                },
            ],
            partitions: vec![
                Partition {
                    name: "p1".into(),
                    priority_job_factor: 10,
                    ..Partition::default()
                },
                Partition {
                    name: "p2".into(),
                    priority_job_factor: 40,
                    default: true,
                    ..Partition::default()
                },
            ],
            ..Snapshot::default()
        };
        // b used everything: U = 1, S = 1/2, F = 2^-2.
        s.usage.accounts.insert("b".into(), billing(100.0));
        s
    }

    fn breakdowns(s: &Snapshot, w: &PriorityWeights, now_ms: u64) -> Vec<PriorityBreakdown> {
        let catalog = Catalog::new(s);
        let fs = fairshare_factors(s, &catalog);
        priorities(s, &catalog, w, &fs, now_ms)
    }

    #[test]
    fn every_factor_weighted_floored_and_summed() {
        let mut s = site();
        let mut j1 = job(1, "alice", "", 0);
        j1.shape = Shape {
            nodes: 2,
            ..Shape::one(Resources::cpu_mem(1, 1))
        };
        j1.partitions = vec!["p1".into()];
        j1.nice = 3;
        let mut j2 = job(2, "bob", "b", 0);
        j2.qos = "high".into();
        s.pending = PendingJob::queue([j1, j2]);
        let w = PriorityWeights {
            age: 168,
            fairshare: 1000,
            job_size: 100,
            partition: 1000,
            qos: 1000,
            assoc: 100,
            max_age_s: 7 * 86_400,
            decay_half_life_s: 0,
        };
        let got = breakdowns(&s, &w, 5 * HOUR_MS + 59 * 60_000);
        assert_eq!(
            got[0],
            PriorityBreakdown {
                job_id: 1,
                // 5 h 59 min of a week at 168: 5.98 -> 5.
                age: 5,
                // a has no usage.
                fairshare: 1000,
                // 2 of 4 hosts.
                job_size: 50,
                // p1's 10 of the highest 40.
                partition: 250,
                // a's default QOS, low: 25 of 100.
                qos: 250,
                // (5 + 1) of the highest sum, b's 10 + 0.
                assoc: 60,
                account: 5,
                user: 1,
                nice: -3,
                total: 5 + 1000 + 50 + 250 + 250 + 60 + 5 + 1 - 3,
                fixed: false,
            }
        );
        assert_eq!(
            got[1],
            PriorityBreakdown {
                job_id: 2,
                age: 5,
                fairshare: 250,
                job_size: 25,
                // The default partition p2.
                partition: 1000,
                qos: 1000,
                assoc: 100,
                account: 10,
                user: 0,
                nice: 0,
                total: 5 + 250 + 25 + 1000 + 1000 + 100 + 10,
                fixed: false,
            }
        );
    }

    #[test]
    fn age_is_one_unit_an_hour_capped_at_max_age_and_counts_from_begin() {
        let mut s = site();
        let mut late = job(3, "alice", "a", 0);
        late.begin_ms = 10 * HOUR_MS;
        s.pending = PendingJob::queue([
            job(1, "alice", "a", 0),
            job(2, "alice", "a", HOUR_MS),
            late,
            job(4, "alice", "a", 20 * 24 * HOUR_MS),
        ]);
        let w = PriorityWeights::default();
        let ages =
            |now_ms| -> Vec<i64> { breakdowns(&s, &w, now_ms).iter().map(|b| b.age).collect() };
        assert_eq!(ages(HOUR_MS), vec![1, 0, 0, 0]);
        assert_eq!(ages(12 * HOUR_MS), vec![12, 11, 2, 0]);
        // A week is the cap: 168 at one and at two weeks.
        assert_eq!(ages(7 * 24 * HOUR_MS), vec![168, 167, 158, 0]);
        assert_eq!(ages(14 * 24 * HOUR_MS), vec![168, 168, 168, 0]);
        // Only the admin inputs and age count with default weights.
        let b = &breakdowns(&s, &w, 14 * 24 * HOUR_MS)[0];
        assert_eq!(b.total, 168 + 5 + 1);
    }

    #[test]
    fn zero_max_age_gives_full_age_once_eligible() {
        let mut s = site();
        let mut later = job(2, "alice", "a", 0);
        later.begin_ms = 50;
        s.pending = PendingJob::queue([job(1, "alice", "a", 0), later]);
        let w = PriorityWeights {
            age: 7,
            max_age_s: 0,
            ..PriorityWeights::default()
        };
        let got: Vec<i64> = breakdowns(&s, &w, 10).iter().map(|b| b.age).collect();
        assert_eq!(got, vec![7, 0]);
    }

    #[test]
    fn a_negative_qos_priority_has_factor_zero_not_less() {
        let mut s = site();
        s.qos.push(Qos {
            priority: 0,
            ..Qos::named("zero")
        });
        s.qos.push(Qos {
            priority: -1_000_000,
            ..Qos::named("burst")
        });
        let in_qos = |id, qos: &str| PendingJob {
            qos: qos.into(),
            ..job(id, "alice", "a", 0)
        };
        s.pending = PendingJob::queue([in_qos(1, "zero"), in_qos(2, "burst"), in_qos(3, "high")]);
        let w = PriorityWeights {
            qos: 1000,
            ..weights()
        };
        let got = breakdowns(&s, &w, 0);
        let qos: Vec<i64> = got.iter().map(|b| b.qos).collect();
        // Clamped like the assoc factor: the burst job gets no QOS share
        // of the weight, and loses nothing it would get elsewhere.
        assert_eq!(qos, vec![0, 0, 1000]);
        assert_eq!(got[1].total, got[0].total);
        assert_eq!(got[2].total, got[0].total + 1000);
        let catalog = Catalog::new(&s);
        // Equal totals fall to the usual tie-breaks (here the job id).
        assert_eq!(
            queue_order(&s.pending, &got, &BTreeMap::new(), &catalog),
            vec![2, 0, 1]
        );

        // With every QOS negative the highest is too: no factor at all,
        // rather than a ratio of two negatives.
        s.qos.retain(|q| q.name == "burst");
        s.pending = PendingJob::queue([in_qos(2, "burst")]);
        assert_eq!(Catalog::new(&s).qos_priority_max, -1_000_000);
        assert_eq!(breakdowns(&s, &w, 0)[0].qos, 0);
    }

    #[test]
    fn an_admin_fixed_priority_replaces_the_multifactor_total() {
        let mut s = site();
        let mut fixed = job(1, "bob", "b", 0);
        fixed.admin_priority = 5000;
        fixed.nice = 10;
        s.pending = PendingJob::queue([fixed, job(2, "bob", "b", 0)]);
        let got = breakdowns(&s, &weights(), 0);
        assert_eq!(got[0], PriorityBreakdown::fixed_at(1, 5000));
        assert_eq!(
            got[0].event_text(),
            "Priority set by an administrator: 5000"
        );
        assert!(!got[1].fixed);
        assert!(got[1].total < 5000, "{:?}", got[1]);
        let served = BTreeMap::new();
        let catalog = Catalog::new(&s);
        assert_eq!(queue_order(&s.pending, &got, &served, &catalog), vec![0, 1]);
    }

    #[test]
    fn nice_lowers_and_negative_nice_raises() {
        let mut s = site();
        let mut nice = job(1, "bob", "b", 0);
        nice.nice = 10;
        let mut mean = job(2, "bob", "b", 0);
        mean.nice = -4;
        s.pending = PendingJob::queue([nice, mean]);
        let got = breakdowns(&s, &weights(), 0);
        assert_eq!((got[0].nice, got[0].total), (-10, 0));
        assert_eq!((got[1].nice, got[1].total), (4, 14));
    }

    #[test]
    fn unresolved_account_gets_no_account_priority_and_full_fairshare() {
        let mut s = site();
        s.pending = PendingJob::queue([job(1, "mallory", "", 0), job(2, "alice", "nosuch", 0)]);
        let w = PriorityWeights {
            fairshare: 100,
            qos: 100,
            ..weights()
        };
        let got = breakdowns(&s, &w, 0);
        for b in &got {
            assert_eq!((b.account, b.fairshare, b.qos), (0, 100, 0), "{b:?}");
        }
        // alice's own priority still counts.
        assert_eq!((got[0].user, got[1].user), (0, 1));
    }

    #[test]
    fn unknown_first_partition_falls_to_the_next_known_one() {
        let mut s = site();
        let mut j = job(1, "alice", "a", 0);
        j.partitions = vec!["gone".into(), "p1".into()];
        let mut none = job(2, "alice", "a", 0);
        none.partitions = vec!["gone".into()];
        s.pending = PendingJob::queue([j, none]);
        let w = PriorityWeights {
            partition: 400,
            ..weights()
        };
        let got = breakdowns(&s, &w, 0);
        assert_eq!((got[0].partition, got[1].partition), (100, 0));
    }

    #[test]
    fn job_size_is_capped_at_the_whole_cluster_and_zero_without_hosts() {
        let mut s = site();
        let mut big = job(1, "alice", "a", 0);
        big.shape.nodes = 9;
        s.pending = PendingJob::queue([big, job(2, "alice", "a", 0)]);
        let w = PriorityWeights {
            job_size: 10,
            ..weights()
        };
        let got = breakdowns(&s, &w, 0);
        assert_eq!((got[0].job_size, got[1].job_size), (10, 2));
        s.hosts.clear();
        let got = breakdowns(&s, &w, 0);
        assert_eq!((got[0].job_size, got[1].job_size), (0, 0));
    }

    #[test]
    fn assoc_factor_is_zero_when_no_sum_is_positive() {
        let mut s = site();
        for a in &mut s.accounts {
            a.priority = -3;
        }
        s.users.clear();
        s.pending = PendingJob::queue([job(1, "alice", "a", 0)]);
        let w = PriorityWeights {
            assoc: 100,
            ..weights()
        };
        let got = breakdowns(&s, &w, 0);
        assert_eq!((got[0].assoc, got[0].account, got[0].total), (0, -3, -3));
    }

    #[test]
    fn event_text_lists_every_part() {
        let b = PriorityBreakdown {
            job_id: 7,
            age: 3,
            fairshare: 0,
            job_size: 12,
            partition: 4,
            qos: 0,
            assoc: 9,
            account: 5,
            user: 1,
            nice: -2,
            total: 32,
            fixed: false,
        };
        assert_eq!(
            b.event_text(),
            "Priority set (age: 3, fairshare: 0, job_size: 12, partition: 4, qos: 0, \
             assoc: 9, account: 5, user: 1, nice: -2)"
        );
    }

    #[test]
    fn update_texts_name_each_changed_admin_input() {
        let old = PriorityBreakdown {
            job_id: 7,
            age: 3,
            fairshare: 0,
            job_size: 0,
            partition: 0,
            qos: 0,
            assoc: 0,
            account: 5,
            user: 1,
            nice: 0,
            total: 9,
            fixed: false,
        };
        let mut new = old.clone();
        new.age = 4;
        new.total = 10;
        assert!(update_texts(&old, &new).is_empty());
        new.account = 10;
        assert_eq!(
            update_texts(&old, &new),
            vec!["Priority updated: account 5 -> 10"]
        );
        new.user = -2;
        assert_eq!(
            update_texts(&old, &new),
            vec![
                "Priority updated: account 5 -> 10",
                "Priority updated: user 1 -> -2",
            ]
        );
    }

    fn with_totals(s: &Snapshot, totals: &[i64]) -> Vec<PriorityBreakdown> {
        s.pending
            .iter()
            .zip(totals)
            .map(|(j, &total)| PriorityBreakdown {
                job_id: j.id,
                age: 0,
                fairshare: 0,
                job_size: 0,
                partition: 0,
                qos: 0,
                assoc: 0,
                account: 0,
                user: 0,
                nice: 0,
                total,
                fixed: false,
            })
            .collect()
    }

    #[test]
    fn queue_order_priority_then_least_served_then_submit_then_id() {
        let mut s = quota_snapshot();
        s.users = vec![UserRecord {
            name: "yuser".into(),
            priority: 0,
            default_account: "y".into(),
        }];
        s.pending = PendingJob::queue([
            // 0: low priority, earliest.
            job(10, "u", "x", 0),
            // 1: high priority.
            job(11, "u", "x", 50),
            // 2..: equal priority 5.
            job(12, "u", "x", 1),
            job(13, "yuser", "", 9),
            job(14, "u", "z", 0),
            job(15, "u", "nosuch", 3),
            job(9, "u", "y", 3),
            job(16, "u", "y", 2),
        ]);
        let b = with_totals(&s, &[1, 9, 5, 5, 5, 5, 5, 5]);
        let catalog = Catalog::new(&s);
        let served = served_fractions(&s, &catalog);
        let order = queue_order(&s.pending, &b, &served, &catalog);
        // Among the fives: y (served 0; job 13 through yuser's default
        // account) and the unknown account (0) by submit time, job 9 before
        // job 15 at the same time by id; then x (0.25); then z (infinite).
        assert_eq!(order, vec![1, 7, 6, 5, 3, 2, 4, 0]);
    }

    #[test]
    fn queue_order_on_an_empty_queue() {
        let s = Snapshot::default();
        let catalog = Catalog::new(&s);
        assert!(queue_order(&[], &[], &BTreeMap::new(), &catalog).is_empty());
    }

    #[test]
    fn total_order_bits_sort_like_total_cmp() {
        let mut values = vec![f64::INFINITY, 0.5, 0.0, -0.0, -1.0, 1e-300, 3.0, f64::NAN];
        let mut by_bits = values.clone();
        values.sort_by(f64::total_cmp);
        by_bits.sort_by_key(|&v| total_order_bits(v));
        assert_eq!(
            values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            by_bits.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn many_jobs_keep_the_same_answers_as_few() {
        // The caches must not mix up jobs sharing names.
        let mut s = site();
        s.pending = (0..1000)
            .map(|i| {
                let (user, acct) = if i % 2 == 0 {
                    ("alice", "")
                } else {
                    ("bob", "b")
                };
                Arc::new(job(i, user, acct, i * 1000))
            })
            .collect();
        let w = PriorityWeights {
            fairshare: 1000,
            qos: 1000,
            assoc: 100,
            ..PriorityWeights::default()
        };
        let all = breakdowns(&s, &w, 10 * HOUR_MS);
        for (i, b) in all.iter().enumerate().step_by(97) {
            let mut one = s.clone();
            one.pending = vec![s.pending[i].clone()];
            assert_eq!(&breakdowns(&one, &w, 10 * HOUR_MS)[0], b);
        }
        let catalog = Catalog::new(&s);
        let order = queue_order(&s.pending, &all, &served_fractions(&s, &catalog), &catalog);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        // alice's jobs (fair share 1000, low QOS 250) lead bob's (250, 0).
        assert!(order[..500].iter().all(|&i| i % 2 == 0));
    }
}
