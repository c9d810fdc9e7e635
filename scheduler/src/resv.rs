//! Admin reservations: windows `[start, end)` on named hosts, held for some
//! users or accounts, or for no one (maintenance).
//!
//! The rules, after Slurm's reservations and the queue model:
//! - Before and during a window, a job outside the reservation is placed on
//!   its hosts only if it is certain, by its time limit, to end before the
//!   window starts. A job without a time limit never is. The pass takes
//!   each window's whole hosts out of their availability profiles, so
//!   placement, backfill and the head's promise all respect it.
//! - A job that names a reservation (`--reservation NAME`) runs only on
//!   its hosts, only once its window has started, and only if the
//!   reservation admits its user and account. It may run past the window's
//!   end on those hosts (they are ordinary hosts again), but never into
//!   another window or into room promised to a blocked job.
//! - Reservation jobs wait without blocking the queue and hold no
//!   backfill promise: their hosts are theirs during the window.
//!
//! Reasons: `Reservation` before the window, `InvalidReservation` for a
//! reservation that does not exist, does not admit the job or has ended,
//! and `ReqNodeNotAvail, Reserved for maintenance` for a job that only a
//! maintenance window keeps from starting now.

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::fit::eligible;
use crate::limits::{self, Charge, LimitRequest, Tally};
use crate::partition::Partition;
use crate::pass::{need_on, push_start, Outcome, PendingJob, Plan, Shape};
use crate::pool::Pool;
use crate::reason::Reason;
use crate::usage::Usage;

/// One admin reservation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminReservation {
    pub name: String,
    /// Host names, each at most once.
    pub hosts: Vec<String>,
    pub start_ms: u64,
    /// Exclusive; after `start_ms`.
    pub end_ms: u64,
    /// Who may use it; both empty = no one (maintenance). With both given
    /// a job must match both, as in Slurm.
    pub users: Vec<String>,
    pub accounts: Vec<String>,
}

impl AdminReservation {
    /// Reserved for no one.
    pub fn is_maintenance(&self) -> bool {
        self.users.is_empty() && self.accounts.is_empty()
    }

    /// Whether a job of `user` under `account` may run in it.
    pub fn admits(&self, user: &str, account: &str) -> bool {
        !self.is_maintenance()
            && (self.users.is_empty() || self.users.iter().any(|u| u == user))
            && (self.accounts.is_empty() || self.accounts.iter().any(|a| a == account))
    }

    /// Whether `[from_ms, until_ms)` (`None`: forever) meets the window.
    pub fn overlaps(&self, from_ms: u64, until_ms: Option<u64>) -> bool {
        from_ms < self.end_ms && until_ms.is_none_or(|u| u > self.start_ms)
    }
}

/// Why a submit naming a reservation is refused (Slurm's words first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReservationRefusal {
    #[error("Requested reservation is invalid: no reservation named {name}")]
    Unknown { name: String },
    #[error("Requested reservation is invalid: reservation {name} ended at {end_s} s")]
    Ended { name: String, end_s: u64 },
    #[error("Access denied to requested reservation {name} (user {user}, account {account})")]
    Denied {
        name: String,
        user: String,
        account: String,
    },
}

/// The submit check of a job's `--reservation`: it must exist, not have
/// ended, and admit the job's user and `account` (the resolved one).
/// A job naming none passes.
pub fn check_submit(
    job: &PendingJob,
    account: &str,
    reservations: &[AdminReservation],
    now_ms: u64,
) -> Result<(), ReservationRefusal> {
    if job.reservation.is_empty() {
        return Ok(());
    }
    let Some(r) = reservations.iter().find(|r| r.name == job.reservation) else {
        return Err(ReservationRefusal::Unknown {
            name: job.reservation.clone(),
        });
    };
    if r.end_ms <= now_ms {
        return Err(ReservationRefusal::Ended {
            name: r.name.clone(),
            end_s: r.end_ms / 1000,
        });
    }
    if !r.admits(&job.user, account) {
        return Err(ReservationRefusal::Denied {
            name: r.name.clone(),
            user: job.user.clone(),
            account: account.to_string(),
        });
    }
    Ok(())
}

/// The windows that still matter this pass, by pool host.
pub(crate) struct Windows<'a> {
    reservations: &'a [AdminReservation],
    /// (pool host index, reservation index), sorted.
    on_host: Vec<(usize, usize)>,
}

impl<'a> Windows<'a> {
    /// Collects the windows not yet over and takes each one's hosts out of
    /// their profiles over the window (from now, for one already open).
    pub fn block(reservations: &'a [AdminReservation], pool: &mut Pool<'_>, now_ms: u64) -> Self {
        let mut on_host = Vec::new();
        for (k, r) in reservations.iter().enumerate() {
            if r.end_ms <= now_ms {
                continue;
            }
            for name in &r.hosts {
                if let Some(i) = pool.index_of(name) {
                    pool.block(i, r.start_ms.max(now_ms), r.end_ms);
                    on_host.push((i, k));
                }
            }
        }
        on_host.sort_unstable();
        Windows {
            reservations,
            on_host,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.on_host.is_empty()
    }

    fn of_host(&self, i: usize) -> impl Iterator<Item = &'a AdminReservation> + '_ {
        let from = self.on_host.partition_point(|&(h, _)| h < i);
        self.on_host[from..]
            .iter()
            .take_while(move |&&(h, _)| h == i)
            .map(|&(_, k)| &self.reservations[k])
    }

    /// The maintenance window that alone keeps `shape` (on `classes`, for
    /// `duration_ms`) from starting now: enough hosts have its room free
    /// now, but too few once the hosts whose maintenance window its run
    /// would meet are left out.
    pub fn maintenance_blocking(
        &self,
        pool: &Pool<'_>,
        shape: &Shape,
        classes: &[usize],
        now_ms: u64,
        duration_ms: Option<u64>,
    ) -> Option<&'a AdminReservation> {
        let until_ms = duration_ms.map(|d| now_ms.saturating_add(d));
        let (mut free, mut clear) = (0usize, 0usize);
        let mut culprit = None;
        for i in pool.members(classes) {
            let Some(need) = need_on(pool.host(i), shape.per_host, shape.exclusive) else {
                continue;
            };
            if !need.within(pool.free_physical(i)) {
                continue;
            }
            free += 1;
            let mut met = self.of_host(i).filter(|r| r.overlaps(now_ms, until_ms));
            match met.next() {
                None => clear += 1,
                Some(r) if r.is_maintenance() => culprit = culprit.or(Some(r)),
                // Another reservation's window: not maintenance.
                Some(_) => return None,
            }
        }
        let wanted = shape.hosts_needed();
        (free >= wanted && clear < wanted)
            .then_some(culprit)
            .flatten()
    }
}

/// What the pass hands [`try_reserved`] besides the job.
pub(crate) struct Ctx<'p, 'a> {
    pub catalog: &'p Catalog<'a>,
    pub tally: &'p mut Tally,
    pub pool: &'p mut Pool<'a>,
    pub usage: &'p Usage,
    pub fairshare: Option<f64>,
    pub now_ms: u64,
}

/// Places `job`, which names a reservation, on that reservation's hosts,
/// or says why it waits.
pub(crate) fn try_reserved<'a>(
    job: &'a PendingJob,
    reservations: &[AdminReservation],
    ctx: Ctx<'_, 'a>,
    plan: &mut Plan,
) -> Outcome {
    let now_ms = ctx.now_ms;
    let waiting = |reason, detail: String| Outcome::Waiting(reason, Some(detail));
    let Some(r) = reservations.iter().find(|r| r.name == job.reservation) else {
        return waiting(
            Reason::InvalidReservation,
            format!("no reservation named {}", job.reservation),
        );
    };
    let account = ctx.catalog.account_of(&job.user, &job.account);
    let account_name = account.map_or("", |a| a.name.as_str());
    if !r.admits(&job.user, account_name) {
        return waiting(
            Reason::InvalidReservation,
            format!(
                "reservation {} does not admit user {} (account {account_name})",
                r.name, job.user
            ),
        );
    }
    if r.end_ms <= now_ms {
        return waiting(
            Reason::InvalidReservation,
            format!("reservation {} ended at {} s", r.name, r.end_ms / 1000),
        );
    }
    if now_ms < r.start_ms {
        return waiting(
            Reason::Reservation,
            format!("reservation {} starts at {} s", r.name, r.start_ms / 1000),
        );
    }
    let qos_name = ctx.catalog.qos_name_of(&job.qos, account);
    let Some(qos) = ctx.catalog.qos(qos_name) else {
        return waiting(Reason::InvalidQos, format!("no QOS named {qos_name}"));
    };
    let partitions: Vec<Option<&'a Partition>> = if ctx.catalog.partitioned {
        ctx.catalog
            .partitions_of(job)
            .into_iter()
            .map(Some)
            .collect()
    } else {
        vec![None]
    };
    if partitions.is_empty() {
        return waiting(
            Reason::ReqNodeNotAvail,
            format!("no such partition: {}", job.partitions.join(",")),
        );
    }
    let duration_ms = (job.time_limit_s > 0).then(|| job.time_limit_s.saturating_mul(1000));
    let until_ms = duration_ms.map(|d| now_ms.saturating_add(d));
    let mut hosts: Vec<usize> = r
        .hosts
        .iter()
        .filter_map(|h| ctx.pool.index_of(h))
        .collect();
    hosts.sort_unstable();
    let mut limit_hit = None;
    for partition in partitions {
        let pname = partition.map(|p| p.name.as_str());
        for (path, shape) in job.paths().iter().enumerate() {
            if !ctx.catalog.runs_in(job, path, partition) {
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
                fairshare: ctx.fairshare,
                has_reservation: true,
            };
            if let Err(hit) = limits::check(&request, ctx.catalog, ctx.tally, ctx.usage) {
                limit_hit.get_or_insert(hit);
                continue;
            }
            let mut chosen = Vec::with_capacity(shape.hosts_needed());
            for &i in &hosts {
                let host = ctx.pool.host(i);
                if eligible(host, shape, pname).is_err() {
                    continue;
                }
                let Some(need) = need_on(host, shape.per_host, shape.exclusive) else {
                    continue;
                };
                // Free now on the host itself (the window keeps others
                // off it), and free in the profile past the window, where
                // other windows and promises to blocked jobs lie.
                if !need.within(ctx.pool.free_physical(i)) {
                    continue;
                }
                if until_ms.is_none_or(|u| u > r.end_ms)
                    && !ctx.pool.holds_between(i, need, r.end_ms, until_ms)
                {
                    continue;
                }
                chosen.push(i);
                if chosen.len() == shape.hosts_needed() {
                    break;
                }
            }
            if chosen.len() < shape.hosts_needed() {
                continue;
            }
            let names = ctx.pool.names(&chosen);
            let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let exact = LimitRequest {
                hosts: Some(&name_refs),
                ..request
            };
            if let Err(hit) = limits::check(&exact, ctx.catalog, ctx.tally, ctx.usage) {
                limit_hit.get_or_insert(hit);
                continue;
            }
            let per_host = ctx.pool.take(shape, &chosen, now_ms, duration_ms, now_ms);
            ctx.tally.charge(&Charge {
                user: &job.user,
                account: account_name,
                qos: &qos.name,
                partition_qos: partition.map(|p| p.qos.as_str()).filter(|q| !q.is_empty()),
                hosts: &name_refs,
                per_host,
                time_limit_s: job.time_limit_s,
            });
            push_start(plan, job, names, per_host, pname.unwrap_or_default(), path);
            return Outcome::Started;
        }
    }
    match limit_hit {
        Some(hit) => Outcome::Waiting(hit.reason, Some(hit.detail)),
        None => waiting(
            Reason::Resources,
            format!(
                "no room now on the {} hosts of reservation {} (until {} s)",
                r.hosts.len(),
                r.name,
                r.end_ms / 1000
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(users: &[&str], accounts: &[&str]) -> AdminReservation {
        AdminReservation {
            name: "r".into(),
            hosts: vec!["a".into()],
            start_ms: 1_000,
            end_ms: 2_000,
            users: users.iter().map(|s| s.to_string()).collect(),
            accounts: accounts.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn admission_needs_every_list_given_and_maintenance_admits_no_one() {
        assert!(!window(&[], &[]).admits("alice", "physics"));
        assert!(window(&["alice"], &[]).admits("alice", "x"));
        assert!(!window(&["alice"], &[]).admits("bob", "x"));
        assert!(window(&[], &["physics"]).admits("bob", "physics"));
        assert!(!window(&["alice"], &["physics"]).admits("alice", "chem"));
        assert!(window(&["alice"], &["physics"]).admits("alice", "physics"));
    }

    #[test]
    fn overlap_is_half_open_and_unbounded_runs_meet_later_windows() {
        let w = window(&[], &[]);
        assert!(!w.overlaps(0, Some(1_000)));
        assert!(w.overlaps(0, Some(1_001)));
        assert!(!w.overlaps(2_000, None));
        assert!(w.overlaps(0, None));
        assert!(w.overlaps(1_999, Some(5_000)));
    }

    #[test]
    fn submit_check_names_what_is_wrong() {
        let rs = vec![window(&["alice"], &[])];
        let mut job = PendingJob {
            user: "bob".into(),
            reservation: "r".into(),
            ..PendingJob::default()
        };
        assert_eq!(
            check_submit(&job, "physics", &rs, 0).map_err(|e| e.to_string()),
            Err("Access denied to requested reservation r (user bob, account physics)".into())
        );
        job.user = "alice".into();
        assert_eq!(check_submit(&job, "physics", &rs, 0), Ok(()));
        assert!(matches!(
            check_submit(&job, "physics", &rs, 2_000),
            Err(ReservationRefusal::Ended { end_s: 2, .. })
        ));
        job.reservation = "nope".into();
        assert!(matches!(
            check_submit(&job, "physics", &rs, 0),
            Err(ReservationRefusal::Unknown { .. })
        ));
    }
}
